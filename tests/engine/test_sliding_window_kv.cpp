// Sliding-window layers in a KV pool of their own (engine.h): an admitted sequence holds a fixed number of blocks
// there (its window and one prefill forward) however long it grows, while the global layers' blocks grow with it;
// the window takes and gives back blocks as it moves, on the host once per block, and the step's slots in that pool
// come from the device. What it computes is checked against transformers through this pool by
// tests/model/test_arch_goldens.cpp (tiny Gemma 3, window 8, 4-token blocks: a block changes every 4 steps).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "support/engine_probe.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

TEST(SlidingWindowKv, ASequenceManyWindowsLongHoldsOnlyItsWindowOnSlidingLayers) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::repo_path("testdata/models/tiny-gemma3"), be);
    const ModelConfig& c = model->config();
    ASSERT_EQ(c.sliding_window, 8);
    EngineOptions opt;
    opt.context = 256;
    opt.block_size = 4;
    opt.prefill_chunk = 6;
    opt.max_seqs = 2;
    Engine engine(*model, be, opt);
    const testing::EngineProbe probe(engine);
    // A forward of 6 rows starting at c0 reads back to c0 - 7: 13 positions, at most 5 blocks of 4.
    const int reserve = (8 - 1 + 6 + 3) / 4 + 1;
    // Beyond the reserves, room for 4 cached windows per sequence (prefix caching): a window spans at most 3 blocks.
    EXPECT_EQ(engine.kv_sliding_blocks_total(), 2 * reserve + 2 * 4 * 3);
    EXPECT_EQ(engine.kv_blocks_total(), 2 * 64);

    std::vector<int32_t> a(30), b(17);
    std::iota(a.begin(), a.end(), 3);
    std::iota(b.begin(), b.end(), 100);
    const int steps = 150;  // to position 179: over 20 windows
    engine.start({a, b}, steps + 1);
    int most_mapped = 0;
    for (int s = 0; s < steps; ++s) {
        engine.step();
        for (int row = 0; row < 2; ++row) {
            ASSERT_EQ(probe.sliding_blocks_held(row), reserve) << "step " << s;
            most_mapped = std::max(most_mapped, probe.sliding_blocks_mapped(row));
        }
        ASSERT_EQ(engine.kv_sliding_blocks_used(), 2 * reserve);
    }
    // A decode query sees 8 positions: 2 or 3 blocks of 4.
    EXPECT_EQ(most_mapped, 3);
    // The global layers hold every position: (30 + 150) / 4 and (17 + 150) / 4 blocks, rounded up.
    EXPECT_GE(engine.kv_blocks_used(), 45 + 42);
    engine.finish();
    EXPECT_EQ(engine.kv_sliding_blocks_used(), 0);
    EXPECT_EQ(engine.kv_blocks_used(), 0);
}

// Replayed decode equals eager decode through the moving window (the step's slots in the sliding pool are computed
// inside the graph), and a sequence computes the same tokens beside another as alone.
TEST(SlidingWindowKv, ReplayEqualsEagerAndBatchedEqualsAlone) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::repo_path("testdata/models/tiny-gemma3"), be);
    std::vector<int32_t> a(21), b(9);
    std::iota(a.begin(), a.end(), 7);
    std::iota(b.begin(), b.end(), 300);
    const int steps = 60;
    auto run = [&](bool capture, const std::vector<std::vector<int32_t>>& prompts) {
        EngineOptions opt;
        opt.capture = capture;
        opt.context = 128;
        opt.block_size = 4;
        opt.prefill_chunk = 6;
        opt.max_seqs = 2;
        Engine engine(*model, be, opt);
        engine.start(prompts, steps + 1);
        for (int s = 0; s < steps; ++s) engine.step();
        return engine.history(steps);
    };
    const std::vector<int32_t> eager = run(false, {a, b}), replayed = run(true, {a, b});
    EXPECT_EQ(replayed, eager);
    const std::vector<int32_t> alone = run(true, {a});
    for (int s = 0; s < steps; ++s) EXPECT_EQ(eager[static_cast<size_t>(s) * 2], alone[static_cast<size_t>(s)]) << s;
}

}  // namespace
}  // namespace tracelm
