// Persistent worker pool for the CPU backend.
//
// One dispatch runs a whole list of ops: every thread takes its share of op i, meets the others at
// a barrier, then moves to op i+1. Eager execution dispatches one op at a time; a replayed graph
// dispatches the entire recorded step at once, so its threads wake up once per step, not per op.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace tracelm::cpu {

// Who runs one call of an op's function: the pool thread (0 is run's caller, so each index has its own slice of
// per-thread scratch), and whether this is that thread's first range of the op in this dispatch (where a thread
// of a chunked op prepares what its later chunks reuse).
struct OpWorker {
    int index = 0;
    bool first = true;
};

// A fully resolved op: a kernel entry point, its packed arguments and how many work items it has.
// Thread `tid` of `n` runs items [items*tid/n, items*(tid+1)/n), rounded to multiples of `grain`; or, when
// `chunk` > 0, the threads claim ranges from a shared counter until none are left (guided_claim), so a
// thread the machine slows down (another process, the hypervisor) does less of the op instead of holding
// up the barrier. Only ops whose items are independent of the thread that runs them may use chunks.
// `barrier` false lets threads go on to the next op without waiting for each other: the recorder
// clears it only when the next op touches no memory this one writes or reads-and-the-next-writes.
struct CpuOp {
    static constexpr size_t kArgBytes = 192;
    using Fn = void (*)(const void* args, int64_t begin, int64_t end, OpWorker worker);
    Fn fn = nullptr;
    int64_t items = 0;
    int64_t grain = 1;
    int64_t chunk = 0;
    mutable int64_t claimed = 0;  // chunked ops: items claimed so far in this dispatch
    bool barrier = true;
    alignas(16) unsigned char args[kArgBytes] = {};
};

// The items a claim of a chunked op takes when `left` items are left: 1 / (kGuidedShare * threads) of them, at
// least `chunk` (guided self-scheduling). Early claims are long runs (each restarts the prefetch streams); the
// last ones are single chunks, so the threads reach the barrier about a chunk apart instead of up to a long claim
// apart. A claim depends only on the counter's value, so an op's ranges are the same whichever thread claims
// them.
constexpr int64_t kGuidedShare = 2;
int64_t guided_claim(int64_t left, int64_t chunk, int threads);

// Sense-reversing barrier: spins briefly (threads are usually a few microseconds apart), then
// sleeps on a futex so an oversubscribed machine is not burnt by spinning.
class Barrier {
   public:
    explicit Barrier(int n) : n_(n) {}
    void arrive_and_wait();

   private:
    const int n_;
    std::atomic<int> count_{0};
    std::atomic<uint32_t> phase_{0};
};

class ThreadPool {
   public:
    explicit ThreadPool(int threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return threads_; }
    // Runs ops[0..n) in order with a barrier after each op that asks for one and after the last;
    // the caller is thread 0. Not re-entrant.
    void run(const CpuOp* ops, size_t n);

    // Default thread count: $TRACELM_THREADS, else the hardware concurrency.
    static int default_threads();

   private:
    void worker_main(int tid);
    void execute(int tid, const CpuOp* ops, size_t n);

    const int threads_;
    std::vector<std::thread> workers_;
    Barrier barrier_;
    const CpuOp* ops_ = nullptr;
    size_t n_ops_ = 0;
    std::atomic<uint32_t> generation_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace tracelm::cpu
