// The CPU backend's worker pool: every item of every op runs exactly once per dispatch, statically split or
// claimed in chunks, and an op after a barrier sees everything the ops before it wrote.
#include "backends/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace tracelm::cpu {
namespace {

struct Counts {
    std::vector<std::atomic<int>> hits;
    explicit Counts(size_t n) : hits(n) {}
};

// An op whose items bump their own counter; `ctx` travels in the packed arguments.
CpuOp counting_op(Counts* ctx, int64_t items, int64_t grain, int64_t chunk, bool barrier) {
    CpuOp op;
    op.fn = [](const void* args, int64_t b, int64_t e, OpWorker) {
        Counts* c = nullptr;
        std::memcpy(&c, args, sizeof(c));
        for (int64_t i = b; i < e; ++i) c->hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    };
    op.items = items;
    op.grain = grain;
    op.chunk = chunk;
    op.barrier = barrier;
    std::memcpy(op.args, &ctx, sizeof(ctx));
    return op;
}

class Pool : public ::testing::TestWithParam<int> {};

TEST_P(Pool, EveryItemRunsOncePerDispatchStaticOrChunked) {
    ThreadPool pool(GetParam());
    // Item counts that the grain and chunk do not divide, chunks larger than the op, and back-to-back
    // ops without a barrier between them.
    struct Shape {
        int64_t items, grain, chunk;
        bool barrier;
    };
    const std::vector<Shape> shapes = {{1000, 16, 0, true},  {1000, 16, 64, false}, {77, 1, 5, false},
                                       {3, 1, 64, true},     {151936, 16, 64, true}, {1, 1, 0, false},
                                       {0, 1, 8, true},      {513, 1, 0, true}};
    std::vector<Counts> counts;
    counts.reserve(shapes.size());
    std::vector<CpuOp> ops;
    for (const Shape& s : shapes) {
        counts.emplace_back(static_cast<size_t>(s.items));
        ops.push_back(counting_op(&counts.back(), s.items, s.grain, s.chunk, s.barrier));
    }
    const int dispatches = 20;
    for (int d = 0; d < dispatches; ++d) pool.run(ops.data(), ops.size());  // as a replay does
    for (size_t o = 0; o < shapes.size(); ++o) {
        for (size_t i = 0; i < counts[o].hits.size(); ++i) {
            ASSERT_EQ(counts[o].hits[i].load(), dispatches) << "op " << o << " item " << i;
        }
    }
}

// A consumer after a barrier reads every element the chunked producer wrote, in every dispatch.
struct Pipe {
    std::vector<int64_t> a, b;
    int64_t round = 0;
};

TEST_P(Pool, BarrierAfterChunkedOpPublishesItsWrites) {
    ThreadPool pool(GetParam());
    const int64_t n = 4096;
    Pipe p{std::vector<int64_t>(n), std::vector<int64_t>(n), 0};
    Pipe* pp = &p;
    CpuOp produce, consume;
    produce.fn = [](const void* args, int64_t b, int64_t e, OpWorker) {
        Pipe* q = nullptr;
        std::memcpy(&q, args, sizeof(q));
        for (int64_t i = b; i < e; ++i) q->a[static_cast<size_t>(i)] = i + q->round;
    };
    produce.items = n;
    produce.chunk = 48;
    consume.fn = [](const void* args, int64_t b, int64_t e, OpWorker) {
        Pipe* q = nullptr;
        std::memcpy(&q, args, sizeof(q));
        const int64_t last = static_cast<int64_t>(q->a.size()) - 1;
        for (int64_t i = b; i < e; ++i) q->b[static_cast<size_t>(i)] = q->a[static_cast<size_t>(last - i)];
    };
    consume.items = n;
    std::memcpy(produce.args, &pp, sizeof(pp));
    std::memcpy(consume.args, &pp, sizeof(pp));
    const CpuOp ops[] = {produce, consume};
    for (int64_t round = 1; round <= 10; ++round) {
        p.round = round * 1000;
        pool.run(ops, 2);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p.b[static_cast<size_t>(i)], n - 1 - i + p.round) << "round " << round;
    }
}

// The ranges a chunked op's claims take, by the rule ThreadPool documents (guided self-scheduling), worked out
// here apart from the pool: each claim takes 1 / (2 * threads) of the items left, at least `chunk`.
std::vector<std::pair<int64_t, int64_t>> guided_ranges(int64_t items, int64_t chunk, int threads) {
    std::vector<std::pair<int64_t, int64_t>> r;
    for (int64_t b = 0; b < items;) {
        const int64_t e = std::min(items, b + std::max(chunk, (items - b) / (2 * threads)));
        r.emplace_back(b, e);
        b = e;
    }
    return r;
}

struct RangeLog {
    std::mutex mutex;
    std::vector<std::pair<int64_t, int64_t>> ranges;
};

// Whichever threads claim them, a chunked op's ranges are the guided sequence: long runs first, then single
// chunks, so the threads reach the barrier at most about a chunk apart.
TEST_P(Pool, ChunkedClaimsShrinkToSingleChunks) {
    const int threads = GetParam();
    ThreadPool pool(threads);
    RangeLog log;
    RangeLog* lp = &log;
    CpuOp op;
    op.fn = [](const void* args, int64_t b, int64_t e, OpWorker) {
        RangeLog* l = nullptr;
        std::memcpy(&l, args, sizeof(l));
        const std::lock_guard lock(l->mutex);
        l->ranges.emplace_back(b, e);
    };
    std::memcpy(op.args, &lp, sizeof(lp));
    struct Shape {
        int64_t items, chunk;
    };
    for (const Shape s : {Shape{256, 1}, Shape{999, 7}, Shape{5, 8}, Shape{4096 + 1024 + 1024, 1}}) {
        op.items = s.items;
        op.chunk = s.chunk;
        const auto want = guided_ranges(s.items, s.chunk, threads);
        ASSERT_LE(want.back().second - want.back().first, s.chunk);
        for (int round = 0; round < 5; ++round) {
            log.ranges.clear();
            pool.run(&op, 1);
            std::sort(log.ranges.begin(), log.ranges.end());
            ASSERT_EQ(log.ranges, want) << s.items << " items, chunk " << s.chunk << ", round " << round;
        }
    }
}

// OpWorker names the thread running a range (each index always the same thread, each thread one index) and
// marks its first range of the op in each dispatch, static or chunked: what a chunked quantized matmul relies on
// to quantize its input once per thread into that thread's scratch slice.
struct WorkerLog {
    std::vector<std::atomic<std::thread::id>> thread_of;  // per index
    std::vector<std::atomic<int>> ranges, firsts;          // per index, this dispatch
    std::atomic<int> errors{0};
    explicit WorkerLog(size_t n) : thread_of(n), ranges(n), firsts(n) {}
};

TEST_P(Pool, WorkerNamesItsThreadAndMarksItsFirstRange) {
    const int threads = GetParam();
    ThreadPool pool(threads);
    WorkerLog log(static_cast<size_t>(threads));
    WorkerLog* lp = &log;
    CpuOp chunked, fixed;
    chunked.fn = fixed.fn = [](const void* args, int64_t, int64_t, OpWorker w) {
        WorkerLog* l = nullptr;
        std::memcpy(&l, args, sizeof(l));
        const auto i = static_cast<size_t>(w.index);
        if (i >= l->ranges.size()) {
            l->errors.fetch_add(1);
            return;
        }
        std::thread::id none;
        if (!l->thread_of[i].compare_exchange_strong(none, std::this_thread::get_id()) &&
            none != std::this_thread::get_id())
            l->errors.fetch_add(1);
        // Only this thread touches entry i, so "first" must be exactly its first range.
        if (w.first != (l->ranges[i].fetch_add(1) == 0)) l->errors.fetch_add(1);
        l->firsts[i].fetch_add(w.first ? 1 : 0);
    };
    chunked.items = 999;
    chunked.chunk = 7;
    fixed.items = 64;
    for (CpuOp* op : {&chunked, &fixed}) std::memcpy(op->args, &lp, sizeof(lp));
    for (int round = 0; round < 20; ++round) {
        for (const CpuOp* op : {&chunked, &fixed}) {
            for (size_t i = 0; i < log.ranges.size(); ++i) log.ranges[i] = log.firsts[i] = 0;
            pool.run(op, 1);
            int ranges = 0;
            for (size_t i = 0; i < log.ranges.size(); ++i) {
                ASSERT_LE(log.firsts[i].load(), 1) << "index " << i;
                ranges += log.ranges[i].load();
            }
            // The fixed split gives each thread one range; chunks give each claim one.
            ASSERT_EQ(ranges, op == &fixed ? threads : static_cast<int>(guided_ranges(999, 7, threads).size()))
                << "round " << round;
        }
    }
    EXPECT_EQ(log.errors.load(), 0);
    for (int i = 0; i < threads; ++i) {
        const std::thread::id ti = log.thread_of[static_cast<size_t>(i)].load();
        if (ti == std::thread::id()) continue;  // this index never ran a range
        for (int j = i + 1; j < threads; ++j) EXPECT_NE(ti, log.thread_of[static_cast<size_t>(j)].load());
    }
}

// Dispatches of different lengths back to back, with more threads than cores so that workers are preempted
// right after the last barrier: a late worker must finish the dispatch it ran, not wander into the next one
// (each item still runs exactly once per dispatch).
TEST(PoolOversubscribed, DispatchesOfDifferentLengthsDoNotLeakIntoEachOther) {
    ThreadPool pool(4);
    Counts one(4), three(4);
    const CpuOp single[] = {counting_op(&one, 4, 1, 0, true)};
    const CpuOp triple[] = {counting_op(&three, 4, 1, 0, true), counting_op(&three, 4, 1, 0, false),
                            counting_op(&three, 4, 1, 0, true)};
    const int rounds = 500;
    for (int r = 0; r < rounds; ++r) {
        pool.run(single, 1);
        pool.run(triple, 3);
    }
    for (size_t i = 0; i < one.hits.size(); ++i) ASSERT_EQ(one.hits[i].load(), rounds) << "single item " << i;
    for (size_t i = 0; i < three.hits.size(); ++i) ASSERT_EQ(three.hits[i].load(), 3 * rounds) << "triple item " << i;
}

INSTANTIATE_TEST_SUITE_P(, Pool, ::testing::Values(1, 2, 3, 5),
                         [](const ::testing::TestParamInfo<int>& p) { return std::to_string(p.param) + "_threads"; });

}  // namespace
}  // namespace tracelm::cpu
