// The state of one render that every builtin needs: the budget of limits.h (steps, loop iterations, bytes
// built, call depth) and the time strftime_now reads. Everything that builds a string or a container charges
// its size here first, so a hostile template stops at the limit before it allocates.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/limits.h"
#include "chat/jinja/value.h"

namespace tracelm::jinja {

class Runtime {
   public:
    Runtime(const Limits& limits, std::optional<std::time_t> now) : limits_(limits), now_(now) {}
    ~Runtime() {
        for (const auto& o : objects_) o->release();
    }
    Runtime(const Runtime&) = delete;
    Runtime& operator=(const Runtime&) = delete;

    const Limits& limits() const { return limits_; }

    void step() {
        if (++steps_ > limits_.max_steps) over("steps", limits_.max_steps);
    }
    // Work proportional to the data an operation reads.
    void scan(size_t bytes) {
        steps_ += bytes / 256;
        if (steps_ > limits_.max_steps) over("steps", limits_.max_steps);
    }
    void alloc(size_t bytes) {
        if (bytes > limits_.max_allocated_bytes - allocated_) over("allocated bytes", limits_.max_allocated_bytes);
        allocated_ += bytes;
    }
    void iteration() {
        if (++iterations_ > limits_.max_loop_iterations) over("loop iterations", limits_.max_loop_iterations);
    }

    Value make_string(std::string s) {
        alloc(s.size());
        return Value::string(std::move(s));
    }
    Value make_list(std::vector<Value> items, bool tuple = false) {
        alloc(items.size() * sizeof(Value));
        return Value::list(std::move(items), tuple);
    }

    // A namespace, loop or other object, kept until the render ends (when release() breaks any cycle).
    template <typename T, typename... A>
    std::shared_ptr<T> make_object(A&&... args) {
        alloc(sizeof(T));
        auto o = std::make_shared<T>(std::forward<A>(args)...);
        objects_.push_back(o);
        return o;
    }

    // Macro calls nest within max_call_depth.
    class CallScope {
       public:
        explicit CallScope(Runtime& rt) : rt_(rt) {
            if (++rt_.depth_ > rt_.limits_.max_call_depth) {
                --rt_.depth_;
                rt_.over("nested macro calls", static_cast<uint64_t>(rt_.limits_.max_call_depth));
            }
        }
        ~CallScope() { --rt_.depth_; }
        CallScope(const CallScope&) = delete;
        CallScope& operator=(const CallScope&) = delete;

       private:
        Runtime& rt_;
    };

    // The local time of the render (fixed when the caller gave one).
    std::tm now() const;

    [[noreturn]] void over(const char* what, uint64_t limit) const;

   private:
    const Limits& limits_;
    std::optional<std::time_t> now_;
    uint64_t steps_ = 0;
    uint64_t iterations_ = 0;
    size_t allocated_ = 0;
    int depth_ = 0;
    std::vector<std::shared_ptr<Object>> objects_;
};

}  // namespace tracelm::jinja
