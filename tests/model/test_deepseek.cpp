// DeepSeek-V3.2 (latent attention, lightning indexer with top-k selection, DeepSeek MoE) on the tiny checkpoint of
// scripts/make_deepseek_checkpoint.py, against the independent float64 reference scripts/deepseek_reference.py
// (itself checked against transformers' DeepseekV32ForCausalLM / DeepseekV3ForCausalLM:
// scripts/check_deepseek_transformers.py): the reference's greedy tokens and logits, sparse (index_topk 8, prompts
// of up to 18 tokens so the selection bites) and dense; then what the engine promises on every model: replay ==
// eager and a request's answer independent of its batch, bit for bit, and sparse == dense while the context fits in
// index_topk.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "engine/engine.h"
#include "runtime/rope.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

const std::string& tiny_dir() {
    static const std::string dir = testing::repo_path("testdata/models/tiny-deepseek-v32");
    return dir;
}

nlohmann::json deepseek_goldens() {
    std::ifstream f(tiny_dir() + "/reference_goldens.json");
    return nlohmann::json::parse(f);
}

EngineOptions options(bool capture, bool dense, int max_seqs = 1) {
    EngineOptions opt;
    opt.capture = capture;
    opt.context = 64;
    opt.block_size = 4;     // sequences span several blocks
    opt.prefill_chunk = 6;  // prompts of 12-18 tokens take 2-3 forwards
    opt.max_seqs = max_seqs;
    opt.dense_attention = dense;
    return opt;
}

TEST(Deepseek, ConfigGivesTheReferencesRopeAndSoftmaxScale) {
    const auto g = deepseek_goldens()["sparse"];
    cpu::CpuBackend be(1);
    const auto model = Model::load(tiny_dir(), be);
    const ModelConfig& c = model->config();
    ASSERT_TRUE(c.mla);
    EXPECT_EQ(c.mla->index_topk, 8);
    EXPECT_NEAR(c.attention_scale(), g["softmax_scale"].get<double>(), 1e-7);
    const auto want = g["rope_inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(static_cast<size_t>(c.head_dim / 2), want.size());
    std::vector<float> got(want.size());
    rope_inv_freq(model->rope(0), c.head_dim, got.data());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << "pair " << i;
    EXPECT_EQ(c.layer_moe, (std::vector<uint8_t>{0, 1, 1}));
}

// Each prompt of `g` (a scripts/deepseek_reference.py output): greedy tokens equal, and its probe and top-k logits
// at every step within `bound`.
void expect_reference(const nlohmann::json& g, const Model& model, Backend& be, const EngineOptions& opt,
                      double bound = 1e-4) {
    Engine engine(model, be, opt);
    for (const auto& p : g["prompts"]) {
        const auto ids = p["prompt"].get<std::vector<int32_t>>();
        const auto want_tokens = p["tokens"].get<std::vector<int32_t>>();
        std::vector<int32_t> got = {engine.start({ids}, static_cast<int>(want_tokens.size()))[0]};
        double max_diff = 0.0;
        for (size_t step = 0; step < p["steps"].size(); ++step) {
            if (step > 0) {
                engine.step();
                got.push_back(engine.sampled()[0]);
            }
            const std::vector<float> logits = engine.logits();
            const auto& s = p["steps"][step];
            for (const auto& [id, want] : s["probe"].items())
                max_diff = std::max(max_diff, std::abs(logits.at(std::stoul(id)) - want.get<double>()));
            for (const auto& pair : s["topk"])
                max_diff = std::max(max_diff, std::abs(logits.at(pair[0].get<size_t>()) - pair[1].get<double>()));
        }
        engine.finish();
        EXPECT_EQ(got, want_tokens) << "prompt " << p["prompt"].dump();
        EXPECT_LE(max_diff, bound) << "prompt " << p["prompt"].dump();
    }
}

class DeepseekGoldens : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(DeepseekGoldens, GreedyTokensAndLogitsAreTheReferences) {
    const auto& [mode, capture] = GetParam();
    cpu::CpuBackend be(2);
    const auto model = Model::load(tiny_dir(), be);
    expect_reference(deepseek_goldens()[mode], *model, be, options(capture, mode == "dense"));
}

INSTANTIATE_TEST_SUITE_P(Tiny, DeepseekGoldens,
                         ::testing::Combine(::testing::Values("sparse", "dense"), ::testing::Bool()),
                         [](const auto& p) {
                             return std::get<0>(p.param) + (std::get<1>(p.param) ? "_replay" : "_eager");
                         });

// The deepseek-v32-slice geometry: V3.2's attention and indexer shapes exactly (128 heads, q_lora 1536, kv_lora 512,
// rope 64, 64 indexer heads of 128 with their 128-point Hadamard rotation, index_topk 2048), bf16 weights, against
// the float64 reference on the same generated checkpoint (prompts of 1, 7 and 20 tokens, 5 greedy steps each).
// Sparse replayed and dense eager: with fewer positions than index_topk both are the reference's full attention.
// Logits within 1e-4, except where the kernels round activations to bf16 before products by bf16 weights (AVX-512
// with AVX512_BF16, kernels_avx512.cpp): 2^-9 relative error in every product's input; about 0.02 on these logits of
// about 3, bound 5e-2 (TRACELM_ISA=avx2 holds such a CPU to 1e-4). A 1.1 GB checkpoint: run in the Release stage and
// the ISA passes.
TEST(Deepseek, SliceGreedyTokensAndLogitsAreTheReferences) {
    std::ifstream f(testing::repo_path("testdata/goldens/deepseek_v32_slice_bf16.json"));
    const auto g = nlohmann::json::parse(f);
    const std::string& dir = testing::golden_checkpoint(g["checkpoint"]);
    cpu::CpuBackend be(2);
    const auto model = Model::load(dir, be);
    ASSERT_EQ(model->config().mla->index_topk, 2048);
    const bool bf16_activations = cpu::active_isa() == cpu::Isa::Avx512 && cpu::cpu_features().avx512_bf16;
    for (const bool dense : {false, true}) {
        EngineOptions opt = options(!dense, dense);
        opt.block_size = 16;
        opt.prefill_chunk = 8;  // the 20-token prompt takes three forwards
        expect_reference(g, *model, be, opt, bf16_activations ? 5e-2 : 1e-4);
    }
}

// Every prompt's tokens and logits, decoded alone eagerly and then all four together from captured graphs.
TEST(Deepseek, BatchedReplayEqualsEachRequestAloneBitForBit) {
    const auto g = deepseek_goldens()["sparse"];
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : g["prompts"]) prompts.push_back(p["prompt"].get<std::vector<int32_t>>());
    constexpr int kSteps = 8;
    cpu::CpuBackend be(2);
    const auto model = Model::load(tiny_dir(), be);
    const int vocab = model->config().vocab_size;
    std::vector<std::vector<int32_t>> alone_tokens;
    std::vector<std::vector<float>> alone_logits;
    {
        Engine engine(*model, be, options(false, false));
        for (const auto& p : prompts) {
            std::vector<int32_t> tokens = {engine.start({p}, kSteps + 1)[0]};
            std::vector<float> logits;
            for (int i = 0; i < kSteps; ++i) {
                engine.step();
                tokens.push_back(engine.sampled()[0]);
                const std::vector<float> l = engine.logits();
                logits.insert(logits.end(), l.begin(), l.end());
            }
            engine.finish();
            alone_tokens.push_back(tokens);
            alone_logits.push_back(logits);
        }
    }
    Engine engine(*model, be, options(true, false, 4));
    const std::vector<int32_t> first = engine.start(prompts, kSteps + 1);
    std::vector<std::vector<int32_t>> tokens(prompts.size());
    std::vector<std::vector<float>> logits(prompts.size());
    for (size_t r = 0; r < prompts.size(); ++r) tokens[r].push_back(first[r]);
    for (int i = 0; i < kSteps; ++i) {
        engine.step();
        const std::vector<int32_t> ids = engine.sampled();
        const std::vector<float> l = engine.logits();
        for (size_t r = 0; r < prompts.size(); ++r) {
            tokens[r].push_back(ids[r]);
            logits[r].insert(logits[r].end(), l.begin() + static_cast<int64_t>(r) * vocab,
                             l.begin() + static_cast<int64_t>(r + 1) * vocab);
        }
    }
    engine.finish();
    for (size_t r = 0; r < prompts.size(); ++r) {
        EXPECT_EQ(tokens[r], alone_tokens[r]) << "prompt " << r;
        EXPECT_TRUE(logits[r] == alone_logits[r]) << "prompt " << r << ": logits differ";
    }
}

// With fewer cached positions than index_topk every position is selected: the same operations as dense attention.
TEST(Deepseek, SparseEqualsDenseWhileTheContextFitsTheTopk) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(tiny_dir(), be);
    std::vector<std::vector<float>> runs;
    for (const bool dense : {false, true}) {
        Engine engine(*model, be, options(false, dense));
        engine.start({{3, 1, 4}}, 5);  // 3 + 4 = 7 positions <= 8
        std::vector<float> all = engine.logits();
        for (int i = 0; i < 4; ++i) {
            engine.step();
            const std::vector<float> l = engine.logits();
            all.insert(all.end(), l.begin(), l.end());
        }
        engine.finish();
        runs.push_back(all);
    }
    EXPECT_TRUE(runs[0] == runs[1]);
}

// Steady-state replayed steps, the indexer's scores, top-k and sparse attention among them, allocate nothing and
// write nothing from the host, alone and with four sequences whose contexts outgrow index_topk.
TEST(Deepseek, ReplayedStepsAllocateAndUploadNothing) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(tiny_dir(), be);
    for (const int seqs : {1, 4}) {
        Engine engine(*model, be, options(true, false, seqs));
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < seqs; ++i) prompts.push_back({3 + i, 17, 250, 9, 41 + i, 7});
        engine.start(prompts, 14);
        engine.step();  // eager warm-up
        engine.step();  // capture + first replay
        ASSERT_TRUE(engine.captured());
        const uint64_t allocations = testing::heap_allocations().load(), uploads = be.uploads();
        for (int i = 0; i < 8; ++i) engine.step();  // positions 8 to 15: past index_topk 8
        EXPECT_EQ(testing::heap_allocations().load() - allocations, 0u) << seqs << " sequences";
        EXPECT_EQ(be.uploads() - uploads, 0u) << seqs << " sequences";
        EXPECT_EQ(engine.replays(), 9);
        engine.finish();
    }
}

}  // namespace
}  // namespace tracelm
