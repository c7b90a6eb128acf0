// The CPU backend's worker pool: every item of every op runs exactly once per dispatch, statically split or
// claimed in chunks, and an op after a barrier sees everything the ops before it wrote.
#include "backends/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
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
    op.fn = [](const void* args, int64_t b, int64_t e) {
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
    produce.fn = [](const void* args, int64_t b, int64_t e) {
        Pipe* q = nullptr;
        std::memcpy(&q, args, sizeof(q));
        for (int64_t i = b; i < e; ++i) q->a[static_cast<size_t>(i)] = i + q->round;
    };
    produce.items = n;
    produce.chunk = 48;
    consume.fn = [](const void* args, int64_t b, int64_t e) {
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
