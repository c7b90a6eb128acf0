// Batch buckets in the engine (on the CPU backend): bucket sizes, one graph per bucket kept across requests,
// and padded rows that change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "support/engine_probe.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

const std::vector<std::vector<int32_t>> kPrompts = {
    {785, 6722, 315, 9625, 374}, {9707, 11, 1879, 0}, {151644, 872, 198}, {5, 6, 7, 8, 9, 10, 11}, {42}};

std::vector<std::vector<int32_t>> first(int n) { return {kPrompts.begin(), kPrompts.begin() + n}; }

// Runs `prompts` for `steps` decode steps on both engines and expects the same first tokens and histories.
void expect_same_decode(Engine& a, Engine& b, const std::vector<std::vector<int32_t>>& prompts, int steps) {
    ASSERT_EQ(a.start(prompts, steps + 1), b.start(prompts, steps + 1));
    for (int i = 0; i < steps; ++i) {
        a.step();
        b.step();
    }
    EXPECT_EQ(a.history(steps), b.history(steps));
}

TEST(BatchBuckets, RoundUpToPowersOfTwoThenMultiplesOf32) {
    const std::vector<std::pair<int, int>> want = {{1, 1},   {2, 2},   {3, 4},   {4, 4},   {5, 8},  {8, 8},
                                                   {9, 16},  {16, 16}, {17, 32}, {32, 32}, {33, 64}, {65, 96}};
    for (const auto& [S, bucket] : want) EXPECT_EQ(Engine::batch_bucket(S), bucket) << S;
}

// Requests of 1, 3, 1, 5 and 3 sequences on one engine: each bucket (1, 4, 8) warms up and captures on its
// first request and replays from the first step of later ones, and every request decodes exactly as an
// engine that never captures.
TEST(BatchBuckets, EachBucketKeepsItsGraphAcrossRequests) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    EngineOptions opt;
    opt.max_seqs = 5;
    opt.context = 128;
    opt.capture = false;
    Engine eager(*model, be, opt);
    opt.capture = true;
    Engine replay(*model, be, opt);
    const int steps = 20;
    int want_replays = 0;
    std::vector<int> seen;
    for (const int S : {1, 3, 1, 5, 3}) {
        SCOPED_TRACE(S);
        ASSERT_NO_FATAL_FAILURE(expect_same_decode(eager, replay, first(S), steps));
        const int bucket = Engine::batch_bucket(S);
        const bool warmed = std::find(seen.begin(), seen.end(), bucket) != seen.end();
        want_replays += warmed ? steps : steps - 1;
        seen.push_back(bucket);
        EXPECT_EQ(replay.replays(), want_replays);
        EXPECT_TRUE(replay.captured());
        EXPECT_GT(replay.graph_ops(), 0u);
    }
}

// Every bucket captured up front (what the server does before it takes requests), after a first request has left
// its prompt's KV blocks in the prefix cache: later requests of every size replay from their first step, and decode
// exactly as on an engine that never captures, the request that shares the cached blocks included (the warm-up
// steps, all rows inert, wrote no KV and left no decode state behind).
TEST(BatchBuckets, CapturedUpFrontEveryStepIsAReplayAndChangesNothing) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    EngineOptions opt;
    opt.max_seqs = 5;
    opt.context = 128;
    opt.capture = false;
    Engine eager(*model, be, opt);
    opt.capture = true;
    Engine replay(*model, be, opt);
    std::vector<int32_t> shared_prefix;  // two full KV blocks, then a tail of its own
    for (int i = 0; i < 2 * opt.block_size + 3; ++i) shared_prefix.push_back(100 + 37 * i);
    const int steps = 12;
    const auto run = [&](const std::vector<std::vector<int32_t>>& prompts) {
        expect_same_decode(eager, replay, prompts, steps);
        eager.finish();
        replay.finish();
    };
    run({shared_prefix});  // bucket 1 warms up and captures on first use
    EXPECT_EQ(replay.replay_seconds(1), 0.0);
    replay.capture_buckets();
    EXPECT_EQ(testing::EngineProbe(replay).captured_buckets(), 4);  // 1, 2, 4, 8 rows
    for (const int b : {1, 2, 4, 8}) EXPECT_GT(replay.replay_seconds(b), 0.0) << b;  // timed, for a scheduler
    EXPECT_EQ(replay.replay_seconds(16), 0.0);
    std::vector<int32_t> longer = shared_prefix;
    longer.insert(longer.end(), {7, 8, 9});
    for (const int S : {1, 3, 5, 2}) {
        SCOPED_TRACE(S);
        std::vector<std::vector<int32_t>> prompts = first(S);
        prompts[0] = longer;
        const int64_t hits = replay.prefix_stats().hit_blocks;
        const int replays = replay.replays();
        run(prompts);
        EXPECT_EQ(replay.prefix_stats().hit_blocks, hits + 2);
        EXPECT_EQ(replay.replays() - replays, steps);
    }
    EXPECT_EQ(testing::EngineProbe(replay).captured_buckets(), 4);
}

// The server's start-up (the KV pool written over with zeros, every bucket captured) changes no request's tokens;
// zeroing the pool is refused while it holds blocks.
TEST(BatchBuckets, KvPoolTouchedUpFrontChangesNothing) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    EngineOptions opt;
    opt.max_seqs = 5;
    opt.context = 64;
    Engine plain(*model, be, opt);
    Engine touched(*model, be, opt);
    touched.touch_kv();
    touched.capture_buckets();
    const int steps = 10;
    for (const int S : {3, 5}) {
        SCOPED_TRACE(S);
        ASSERT_NO_FATAL_FAILURE(expect_same_decode(plain, touched, first(S), steps));
    }
    EXPECT_THROW(touched.touch_kv(), std::logic_error);  // the last request's sequences hold their blocks
}

// Sequences batched with others (3 sequences: one padded row) decode exactly as each does alone.
TEST(BatchBuckets, PaddedRowsAndBatchmatesChangeNothing) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    EngineOptions opt;
    opt.max_seqs = 3;
    opt.context = 128;
    Engine batch(*model, be, opt);
    opt.max_seqs = 1;
    Engine alone(*model, be, opt);
    const int steps = 30;
    batch.start(first(3), steps + 1);
    for (int i = 0; i < steps; ++i) batch.step();
    const std::vector<int32_t> together = batch.history(steps);
    for (int s = 0; s < 3; ++s) {
        alone.start({kPrompts[static_cast<size_t>(s)]}, steps + 1);
        for (int i = 0; i < steps; ++i) alone.step();
        const std::vector<int32_t> own = alone.history(steps);
        for (int i = 0; i < steps; ++i) {
            EXPECT_EQ(together[static_cast<size_t>(i * 3 + s)], own[static_cast<size_t>(i)]) << "sequence " << s << " step " << i;
        }
    }
}

}  // namespace
}  // namespace tracelm
