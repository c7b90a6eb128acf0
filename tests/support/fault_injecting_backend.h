// A CPU backend whose uploads or graph replays throw on demand, as a GPU backend's would on a device error: the
// engine's and the scheduler's error paths meet the failure at the backend interface, where a real one comes from.
#pragma once

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>

#include "backends/cpu/cpu_backend.h"

namespace tracelm::testing {

class FaultInjectingBackend : public cpu::CpuBackend {
   public:
    using CpuBackend::CpuBackend;

    // The next `n` uploads into the buffer called `buffer`, after `skip` that succeed, throw.
    void fail_uploads(const std::string& buffer, int n, int skip = 0) {
        std::lock_guard<std::mutex> lock(mu_);
        upload_buffer_ = buffer;
        upload_skip_ = skip;
        upload_failures_ = n;
    }
    // The next `n` graph replays throw (before running anything).
    void fail_replays(int n) { replay_failures_.store(n); }
    int injected() const { return injected_.load(); }

   protected:
    void do_upload(const Tensor& dst, const void* src) override {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (upload_failures_ > 0 && dst.name() == upload_buffer_) {
                if (upload_skip_ > 0) {
                    --upload_skip_;
                } else {
                    --upload_failures_;
                    ++injected_;
                    throw std::runtime_error("injected device error: upload into '" + dst.name() + "'");
                }
            }
        }
        CpuBackend::do_upload(dst, src);
    }
    void do_replay(GraphId g) override {
        int n = replay_failures_.load();
        while (n > 0 && !replay_failures_.compare_exchange_weak(n, n - 1)) {
        }
        if (n > 0) {
            ++injected_;
            throw std::runtime_error("injected device error: replay of graph " + std::to_string(g));
        }
        CpuBackend::do_replay(g);
    }

   private:
    std::mutex mu_;
    std::string upload_buffer_;
    int upload_skip_ = 0, upload_failures_ = 0;
    std::atomic<int> replay_failures_{0};
    std::atomic<int> injected_{0};
};

}  // namespace tracelm::testing
