#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TRACELM_PAUSE() _mm_pause()
#else
#define TRACELM_PAUSE() std::this_thread::yield()
#endif

namespace tracelm::cpu {

namespace {
// About 20-50 us of spinning before a thread sleeps: long enough to bridge the gap between two ops
// of one step, short enough not to burn a core between decode steps.
constexpr int kSpinIterations = 20000;

template <typename Pred>
void spin_then_wait(std::atomic<uint32_t>& word, uint32_t old, Pred done) {
    for (int i = 0; i < kSpinIterations; ++i) {
        if (done()) return;
        TRACELM_PAUSE();
    }
    while (!done()) word.wait(old, std::memory_order_acquire);
}
}  // namespace

int64_t guided_claim(int64_t left, int64_t chunk, int threads) {
    const int64_t share = left / (kGuidedShare * threads);
    return std::min(left, std::max(chunk, share));
}

void Barrier::arrive_and_wait() {
    if (n_ == 1) return;
    const uint32_t phase = phase_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
        count_.store(0, std::memory_order_relaxed);
        phase_.store(phase + 1, std::memory_order_release);
        phase_.notify_all();
        return;
    }
    spin_then_wait(phase_, phase, [&] { return phase_.load(std::memory_order_acquire) != phase; });
}

int ThreadPool::default_threads() {
    if (const char* env = std::getenv("TRACELM_THREADS")) {
        const int n = std::atoi(env);
        if (n >= 1 && n <= 1024) return n;
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
}

ThreadPool::ThreadPool(int threads) : threads_(threads < 1 ? 1 : threads), barrier_(threads_) {
    workers_.reserve(static_cast<size_t>(threads_ - 1));
    for (int t = 1; t < threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::execute(int tid, const CpuOp* ops, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const CpuOp& op = ops[i];
        if (op.chunk > 0) {
            std::atomic_ref<int64_t> claimed(op.claimed);
            OpWorker w{tid, true};
            int64_t b = claimed.load(std::memory_order_relaxed);
            while (b < op.items) {
                const int64_t e = b + guided_claim(op.items - b, op.chunk, threads_);
                if (!claimed.compare_exchange_weak(b, e, std::memory_order_relaxed)) continue;
                op.fn(op.args, b, e, w);
                w.first = false;
                b = claimed.load(std::memory_order_relaxed);
            }
        } else {
            const int64_t units = (op.items + op.grain - 1) / op.grain;
            const int64_t b = units * tid / threads_ * op.grain;
            int64_t e = units * (tid + 1) / threads_ * op.grain;
            if (e > op.items) e = op.items;
            if (b < e) op.fn(op.args, b, e, OpWorker{tid, true});
        }
        if (op.barrier || i + 1 == n) barrier_.arrive_and_wait();
    }
}

void ThreadPool::worker_main(int tid) {
    uint32_t seen = 0;
    for (;;) {
        spin_then_wait(generation_, seen, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load(std::memory_order_acquire)) return;
        // Read the op list once, here: once this worker passes the dispatch's last barrier, thread 0 may
        // already be publishing the next list, which this worker must only start after the next wake-up.
        execute(tid, ops_, n_ops_);
    }
}

void ThreadPool::run(const CpuOp* ops, size_t n) {
    if (n == 0) return;
    ops_ = ops;
    n_ops_ = n;
    if (threads_ > 1) {
        generation_.fetch_add(1, std::memory_order_acq_rel);
        generation_.notify_all();
    }
    // The barrier after the last op doubles as the completion signal.
    execute(0, ops, n);
    // Every thread is past that barrier and touches no op until the next dispatch, whose wake-up publishes
    // the reset counters.
    for (size_t i = 0; i < n; ++i) ops[i].claimed = 0;
}

}  // namespace tracelm::cpu
