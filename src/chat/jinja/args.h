// Binds a call's positional and keyword arguments to a Python-style parameter list, with Python's errors for
// too many arguments, unknown keywords and duplicates; absent parameters read as their defaults.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/value.h"

namespace tracelm::jinja {

class Args {
   public:
    Args(std::string_view function, std::initializer_list<std::string_view> params, CallArgs& call);

    bool has(size_t i) const { return slots_[i] != nullptr; }
    const Value& get(size_t i) const;  // Undefined when absent
    Value get_or(size_t i, const Value& fallback) const { return has(i) ? *slots_[i] : fallback; }
    bool flag(size_t i, bool fallback) const;         // truthiness, as Python's `if x`
    int64_t integer(size_t i, int64_t fallback) const;  // an int (or bool) is required when given
    // A string argument; null when absent or None.
    const std::string* string_or_null(size_t i) const;

   private:
    std::string function_;
    std::vector<std::string_view> params_;
    std::vector<const Value*> slots_;
};

}  // namespace tracelm::jinja
