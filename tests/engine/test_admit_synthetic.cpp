// Engine::admit_synthetic, the long-context benchmark's way to a context without its prefill: the row decodes from
// the given position with the blocks it asked for, reproducibly for a seed, replayed as eagerly, and it refuses what
// it cannot do safely (a shared prefix cache, whose blocks the random values would overwrite).
#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "support/engine_probe.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

EngineOptions options(bool capture) {
    EngineOptions opt;
    opt.capture = capture;
    opt.context = 64;
    opt.block_size = 4;
    opt.prefix_cache = false;
    return opt;
}

// Tokens and logits of 5 steps at a synthetic context of 37 positions (DeepSeek tiny: index_topk 8, so the indexer
// selects among them).
std::pair<std::vector<int32_t>, std::vector<float>> decode(const Model& model, Backend& be, bool capture,
                                                          uint64_t seed) {
    Engine e(model, be, options(capture));
    const int row = e.admit_synthetic(37, 5, 50, seed);
    EXPECT_EQ(row, 0);
    EXPECT_EQ(testing::EngineProbe(e).position(row), 37);
    EXPECT_EQ(e.kv_blocks_used(), 13);  // 50 tokens in blocks of 4
    std::vector<int32_t> tokens;
    std::vector<float> logits;
    for (int i = 0; i < 5; ++i) {
        e.step();
        tokens.push_back(e.sampled()[0]);
        const std::vector<float> l = e.logits();
        logits.insert(logits.end(), l.begin(), l.end());
    }
    EXPECT_EQ(testing::EngineProbe(e).position(row), 42);
    e.release(row);
    EXPECT_EQ(e.kv_blocks_used(), 0);
    return {tokens, logits};
}

TEST(AdmitSynthetic, DecodesFromTheGivenPositionReproduciblyAndReplaysAsEagerly) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::repo_path("testdata/models/tiny-deepseek-v32"), be);
    const auto eager = decode(*model, be, false, 7);
    const auto replay = decode(*model, be, true, 7);
    EXPECT_EQ(eager.first, replay.first);
    EXPECT_TRUE(eager.second == replay.second);
    EXPECT_FALSE(decode(*model, be, false, 8).second == eager.second);  // other values, other logits
}

TEST(AdmitSynthetic, RefusesAPrefixCacheAndContextsThatDoNotFit) {
    cpu::CpuBackend be(1);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    EngineOptions shared = options(false);
    shared.prefix_cache = true;
    Engine with_cache(*model, be, shared);
    EXPECT_THROW(with_cache.admit_synthetic(8, 5, 16, 1), std::logic_error);
    Engine e(*model, be, options(false));
    EXPECT_THROW(e.admit_synthetic(64, 5, 64, 1), std::runtime_error);  // 64 positions and the input: 65 > 64
    EXPECT_THROW(e.admit_synthetic(0, 5, 8, 1), std::runtime_error);
    EXPECT_THROW(e.admit_synthetic(8, -1, 16, 1), std::runtime_error);
    EXPECT_EQ(e.kv_blocks_used(), 0);
}

}  // namespace
}  // namespace tracelm
