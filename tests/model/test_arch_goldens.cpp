// Qwen2 (q/k/v bias), Llama, Mistral and Gemma 3 checkpoints written by transformers itself, against the
// full logits transformers computed for prefill and 20 greedy decode steps
// (scripts/make_arch_goldens.py). Eager and replayed decode, from the folder and from the same checkpoint
// converted to GGUF (which, for Llama, stores q/k rows permuted the way llama.cpp's converter does).
// Two Llamas scale RoPE ("llama3" as in Llama 3.1, and "linear"); their GGUF carries the scaling as
// llama.cpp's converter writes it (the tensor rope_freqs.weight, the rope.scaling.* keys), and their goldens
// also hold transformers' inverse frequencies, which the model's must match. The Gemma 3 one has a sliding window of
// 8 on three of its four layers (prompts and decode outgrow it), its global layer's RoPE scaled linearly and the
// local ones on their own base, query_pre_attn_scalar != head_dim, GELU-tanh, (1 + w) norms; it has no GGUF
// conversion yet.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "checkpoint/gguf_convert.h"
#include "runtime/rope.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

class ArchGoldens : public ::testing::TestWithParam<std::tuple<std::string, bool, bool>> {};

TEST_P(ArchGoldens, LogitsAndGreedyTokensMatchTransformers) {
    const auto& [name, capture, gguf] = GetParam();
    const std::string dir = testing::repo_path("testdata/models/" + name);
    std::ifstream f(dir + "/goldens.json");
    ASSERT_TRUE(f) << dir;
    const auto g = nlohmann::json::parse(f);

    std::string path = dir;
    if (gguf) {
        path = (std::filesystem::temp_directory_path() / ("tracelm-" + std::to_string(getpid()) + "-" + name + ".gguf"))
                   .string();
        convert_to_gguf(dir, path);
    }
    cpu::CpuBackend be(2);
    const auto model = Model::load(path, be);
    if (gguf) std::filesystem::remove(path);  // mapped: the data stays readable
    if (g.contains("inv_freq")) {
        const auto want = g["inv_freq"].get<std::vector<double>>();
        std::vector<float> got(want.size());
        ASSERT_EQ(static_cast<size_t>(model->config().head_dim / 2), want.size());
        rope_inv_freq(model->rope(0), model->config().head_dim, got.data());
        for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << "pair " << i;
    }
    EngineOptions opt;
    opt.capture = capture;
    opt.context = 128;
    opt.block_size = 4;     // decode crosses many block boundaries
    opt.prefill_chunk = 6;  // the longest prompt takes three prefill chunks
    opt.kv_dtype = DType::F32;  // GGUF files too: the goldens are transformers' f32 attention
    Engine engine(*model, be, opt);
    for (const auto& p : g["prompts"]) {
        const auto ids = p["prompt_ids"].get<std::vector<int32_t>>();
        const auto want_tokens = p["tokens"].get<std::vector<int32_t>>();
        const auto& rows = p["logits"];
        std::vector<int32_t> got = {engine.start({ids}, static_cast<int>(want_tokens.size()))[0]};
        double max_diff = 0;
        for (size_t step = 0; step < rows.size(); ++step) {
            if (step > 0) {
                engine.step();
                got.push_back(engine.sampled()[0]);
            }
            const auto logits = engine.logits();
            const auto want = rows[step].get<std::vector<double>>();
            ASSERT_EQ(logits.size(), want.size());
            for (size_t i = 0; i < want.size(); ++i) max_diff = std::max(max_diff, std::abs(logits[i] - want[i]));
        }
        engine.finish();
        EXPECT_EQ(got, want_tokens);
        EXPECT_LE(max_diff, 1e-3);
    }
}

std::string case_name(const ::testing::TestParamInfo<ArchGoldens::ParamType>& info) {
    std::string n = std::get<0>(info.param) + (std::get<1>(info.param) ? "_replay" : "_eager") +
                    (std::get<2>(info.param) ? "_gguf" : "");
    for (char& c : n)
        if (c == '-') c = '_';
    return n;
}

INSTANTIATE_TEST_SUITE_P(Models, ArchGoldens,
                         ::testing::Combine(::testing::Values("tiny-qwen2", "tiny-llama", "tiny-mistral", "tiny-llama3-rope",
                                                              "tiny-llama-linear-rope"),
                                            ::testing::Bool(), ::testing::Bool()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Gemma3, ArchGoldens,
                         ::testing::Combine(::testing::Values("tiny-gemma3"), ::testing::Bool(), ::testing::Values(false)),
                         case_name);

}  // namespace
}  // namespace tracelm
