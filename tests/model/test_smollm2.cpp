// The real SmolLM2-135M-Instruct (Q4_1 GGUF) against llama.cpp: greedy continuations of 9 prompts,
// 32 tokens each (testdata/goldens/smollm2_greedy.json, from scripts/make_llamacpp_goldens.py), eager
// and replayed.
//
// Every token must be identical: near-ties (top-2 margins down to 0.017) and 8-bit activation quantization
// make the continuations chaotic in the last bit, so this holds only because the forward reproduces
// llama.cpp's CPU arithmetic op by op (docs/ggml-numerics.md; tests/backends/test_ggml_conformance.cpp pins each op).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

class SmolLM2 : public ::testing::TestWithParam<bool> {};

// How many leading tokens of the engine's greedy continuation of `prompt` equal `want`.
size_t greedy_steps_equal(Engine& engine, const std::vector<int32_t>& prompt, const std::vector<int32_t>& want) {
    std::vector<int32_t> got = {engine.start({prompt}, static_cast<int>(want.size()))[0]};
    while (got.size() < want.size()) {
        engine.step();
        got.push_back(engine.sampled()[0]);
    }
    engine.finish();
    size_t same = 0;
    while (same < want.size() && got[same] == want[same]) ++same;
    return same;
}

TEST_P(SmolLM2, GreedyContinuationsMatchLlamaCpp) {
    TRACELM_NEED_SMOLLM2();
    std::ifstream f(testing::repo_path("testdata/goldens/smollm2_greedy.json"));
    const auto g = nlohmann::json::parse(f);
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::smollm2_gguf_path(), be);
    EngineOptions opt;
    opt.capture = GetParam();
    opt.context = 256;
    Engine engine(*model, be, opt);
    ASSERT_GE(g["records"].size(), 8u);
    for (const auto& r : g["records"]) {
        const auto want = r["tokens"].get<std::vector<int32_t>>();
        ASSERT_GE(want.size(), 32u);
        const size_t same = greedy_steps_equal(engine, r["prompt_ids"].get<std::vector<int32_t>>(), want);
        EXPECT_EQ(same, want.size()) << r["prompt"].get<std::string>() << ": parted from llama.cpp at step " << same
                                     << " (llama.cpp's top-2 margin there "
                                     << r["top2_margin"][std::min(same, want.size() - 1)].get<double>() << ")";
    }
}

// The fast numerics (quant.h: a different float order, so not llama.cpp's bits) follow llama.cpp's greedy
// continuations as closely as the rounding allows: a continuation may part from llama.cpp's only at a near-tie,
// a step where llama.cpp's top-2 margin is below kNearTie, and most do not part at all.
TEST(SmolLM2Fast, PartsFromLlamaCppOnlyAtNearTies) {
    TRACELM_NEED_SMOLLM2();
    constexpr double kNearTie = 0.1;
    std::ifstream f(testing::repo_path("testdata/goldens/smollm2_greedy.json"));
    const auto g = nlohmann::json::parse(f);
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::smollm2_gguf_path(), be, {}, Numerics::Fast);
    ASSERT_EQ(model->weight_dtype(), DType::Q4_1_R16);
    EngineOptions opt;
    opt.context = 256;
    Engine engine(*model, be, opt);
    size_t whole = 0;
    for (const auto& r : g["records"]) {
        const auto want = r["tokens"].get<std::vector<int32_t>>();
        const size_t same = greedy_steps_equal(engine, r["prompt_ids"].get<std::vector<int32_t>>(), want);
        if (same == want.size()) {
            ++whole;
            continue;
        }
        EXPECT_LT(r["top2_margin"][same].get<double>(), kNearTie)
            << r["prompt"].get<std::string>() << ": parted from llama.cpp at step " << same;
    }
    EXPECT_GE(whole, g["records"].size() / 2) << whole << " continuations whole";
}

// The CLI's default model and --chat build exactly the prompt llama.cpp was given for the same conversation
// (ChatML with the template's default system prompt), and decode it from a captured graph: the same number of
// prompt tokens and llama.cpp's first greedy tokens for that prompt.
TEST(SmolLM2Cli, DefaultModelChatPromptIsTheGoldenPrompt) {
    TRACELM_NEED_SMOLLM2();
    std::ifstream f(testing::repo_path("testdata/goldens/smollm2_greedy.json"));
    const auto g = nlohmann::json::parse(f);
    const auto& rec = g["records"][5];
    ASSERT_EQ(rec["prompt"].get<std::string>().find("Write a haiku about the sea."), 115u);
    const std::string cache =
        std::filesystem::path(testing::smollm2_gguf_path()).parent_path().parent_path().string();
    const auto r = testing::run_tracelm_env("TRACELM_CACHE=" + cache,
                                            "generate --chat --prompt 'Write a haiku about the sea.' --max-tokens 6 --json",
                                            false);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt_tokens"].get<size_t>(), rec["prompt_ids"].size());
    EXPECT_TRUE(j["capture"].get<bool>());
    const auto want = rec["tokens"].get<std::vector<int32_t>>();
    ASSERT_GE(want.size(), 6u);
    EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), std::vector<int32_t>(want.begin(), want.begin() + 6));
}

INSTANTIATE_TEST_SUITE_P(Decode, SmolLM2, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "replay" : "eager"; });

}  // namespace
}  // namespace tracelm
