// The CUDA backend end to end on generated Qwen3 checkpoints (skipped without a device): greedy decode against
// the CPU backend, and replayed decode against eager decode on the GPU. Everywhere: `--backend cuda` fails
// with a clear message when this process cannot use CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "engine/engine.h"
#include "model/model.h"
#include "support/test_support.h"
#include "checkpoint/gguf_convert.h"

namespace tracelm {
namespace {

std::string cuda_unavailable() {
    for (const BackendInfo& b : backend_registry()) {
        if (b.name == "cuda") return b.unavailable();
    }
    return "no cuda entry in the backend registry";
}

#define TRACELM_NEED_CUDA()                                   \
    do {                                                      \
        const std::string why = cuda_unavailable();           \
        if (!why.empty()) GTEST_SKIP() << why;                \
    } while (0)

// Sampled ids and logits [S, vocab] after the prefill and after each of `steps` decode steps.
struct Decoded {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<float>> logits;
};

Decoded decode(Backend& be, const Model& model, const std::vector<std::vector<int32_t>>& prompts, int steps,
               bool capture) {
    EngineOptions opt;
    opt.max_seqs = static_cast<int>(prompts.size());
    opt.context = 512;
    opt.prefill_chunk = 64;
    opt.capture = capture;
    Engine engine(model, be, opt);
    Decoded d;
    d.tokens.push_back(engine.start(prompts, steps + 1));
    d.logits.push_back(engine.logits());  // after the prefills: the last sequence's row only
    for (int i = 0; i < steps; ++i) {
        engine.step();
        d.tokens.push_back(engine.sampled());
        d.logits.push_back(engine.logits());
    }
    if (capture && steps >= 2) {
        EXPECT_TRUE(engine.captured());
    }
    return d;
}

std::vector<std::vector<int32_t>> prompts_for(int S) {
    std::vector<std::vector<int32_t>> p = {{785, 6722, 315, 9625, 374}, {9707, 11, 1879, 0}, {151644, 872, 198}};
    std::vector<int32_t> long_prompt;
    for (int i = 0; i < 90; ++i) long_prompt.push_back(1000 + 37 * i);  // two prefill chunks
    p.push_back(long_prompt);
    p.resize(static_cast<size_t>(S));
    return p;
}

// GPU greedy decode follows the CPU's while the two runs see the same tokens: at each step the logits agree
// within 2e-3 of the step's largest logit (f32 sums in another order through every layer), and the sampled
// ids are equal wherever the CPU's top-2 margin exceeds 0.05. Once a near-tie resolves differently the
// contexts differ, so the comparison ends there. The CPU must sum bf16 weights against f32 activations as the GPU
// does: on a CPU with AVX512_BF16 its kernels round activations to bf16 (kernels_avx512.cpp), so run these with
// TRACELM_ISA=avx2 there (scripts/gpu_check.sh does).
void expect_gpu_follows_cpu(const std::string& geometry, DType dtype, int S, int steps) {
    const std::string& dir = testing::generated_checkpoint(geometry, 11, dtype);
    const std::unique_ptr<Backend> cpu_be = make_backend("cpu");
    const std::unique_ptr<Backend> gpu_be = make_backend("cuda");
    const auto cpu_model = Model::load(dir, *cpu_be);
    const auto gpu_model = Model::load(dir, *gpu_be);
    const auto prompts = prompts_for(S);
    const Decoded want = decode(*cpu_be, *cpu_model, prompts, steps, true);
    const Decoded got = decode(*gpu_be, *gpu_model, prompts, steps, true);
    const size_t V = static_cast<size_t>(cpu_model->config().vocab_size);

    int compared = 0;
    for (size_t step = 0; step < want.tokens.size(); ++step) {
        bool diverged = false;
        const int rows = static_cast<int>(want.logits[step].size() / V);  // 1 after the prefill
        for (int s = 0; s < S; ++s) {
            if (s >= rows) {
                if (got.tokens[step][s] != want.tokens[step][s]) diverged = true;
                continue;
            }
            const float* w = want.logits[step].data() + s * V;
            const float* g = got.logits[step].data() + s * V;
            float scale = 0.0f, err = 0.0f, top1 = -INFINITY, top2 = -INFINITY;
            for (size_t i = 0; i < V; ++i) {
                scale = std::max(scale, std::abs(w[i]));
                err = std::max(err, std::abs(w[i] - g[i]));
                if (w[i] > top1) {
                    top2 = top1;
                    top1 = w[i];
                } else if (w[i] > top2) {
                    top2 = w[i];
                }
            }
            EXPECT_LE(err, 2e-3f * scale) << geometry << " step " << step << " sequence " << s;
            if (got.tokens[step][s] != want.tokens[step][s]) {
                EXPECT_LE(top1 - top2, 0.05f) << geometry << " step " << step << " sequence " << s
                                              << ": tokens differ although the CPU's margin is " << top1 - top2;
                diverged = true;
            }
        }
        if (diverged) break;
        ++compared;
    }
    ::testing::Test::RecordProperty("compared_steps", compared);
}

TEST(CudaEngine, GreedyDecodeFollowsCpuTinyF32) {
    TRACELM_NEED_CUDA();
    expect_gpu_follows_cpu("tiny", DType::F32, 1, 64);
}

TEST(CudaEngine, GreedyDecodeFollowsCpuTinyBf16ThreeSequences) {
    TRACELM_NEED_CUDA();
    expect_gpu_follows_cpu("tiny", DType::BF16, 3, 64);  // batch bucket 4: one padded row
}

TEST(CudaEngine, GreedyDecodeFollowsCpuQwen3_06bBf16) {
    TRACELM_NEED_CUDA();
    expect_gpu_follows_cpu("qwen3-0.6b", DType::BF16, 1, 64);
}

// The GPU's kernels are deterministic (fixed reduction order, split count fixed by the block table's
// capacity), so replaying the captured step must reproduce the eager step exactly.
void expect_replay_equals_eager_on_gpu(const std::string& geometry, DType dtype, int S) {
    const std::unique_ptr<Backend> be = make_backend("cuda");
    const auto model = Model::load(testing::generated_checkpoint(geometry, 11, dtype), *be);
    const auto prompts = prompts_for(S);
    const Decoded eager = decode(*be, *model, prompts, 64, false);
    const Decoded replay = decode(*be, *model, prompts, 64, true);
    ASSERT_EQ(eager.tokens, replay.tokens);
    for (size_t step = 0; step < eager.logits.size(); ++step) {
        ASSERT_EQ(0, std::memcmp(eager.logits[step].data(), replay.logits[step].data(),
                                 eager.logits[step].size() * sizeof(float)))
            << "logits differ at step " << step;
    }
}

TEST(CudaEngine, ReplayEqualsEagerTiny) {
    TRACELM_NEED_CUDA();
    expect_replay_equals_eager_on_gpu("tiny", DType::F32, 1);
    expect_replay_equals_eager_on_gpu("tiny", DType::BF16, 3);
}

TEST(CudaEngine, ReplayEqualsEagerQwen3_06bBf16) {
    TRACELM_NEED_CUDA();
    expect_replay_equals_eager_on_gpu("qwen3-0.6b", DType::BF16, 1);
}

TEST(CudaEngine, QuantizedWeightsAreRefusedByName) {
    TRACELM_NEED_CUDA();
    const std::unique_ptr<Backend> be = make_backend("cuda");
    Buffer* w = be->alloc(4 * 20, "blk.0.ffn_up.weight");
    Buffer* x = be->alloc(32 * sizeof(float), "x");
    Buffer* y = be->alloc(4 * sizeof(float), "y");
    try {
        be->matmul(whole(x, DType::F32, 1, 32), whole(w, DType::Q4_1, 4, 32), nullptr, whole(y, DType::F32, 1, 4));
        ADD_FAILURE() << "a q4_1 weight was accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_STREQ(e.what(), "matmul: weight 'blk.0.ffn_up.weight' has type q4_1, this backend runs f32, bf16, f16");
    }
}

// Without a device: the loader asks the CUDA backend's capabilities (from the registry) before binding anything.
TEST(CudaCapabilities, QuantizedGgufIsRefusedAtLoadTime) {
    const testing::TempDir dir;
    const std::string path = dir.str("q4_0.gguf");
    make_random_gguf("qwen3", DType::Q4_0, 3, path);
    const std::unique_ptr<Model> m = Model::open(path);
    try {
        m->require_supported(backend_info("cuda").capabilities(), "cuda");
        ADD_FAILURE() << "a q4_0 model was accepted for cuda";
    } catch (const std::runtime_error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("has type q4_0, which backend 'cuda' does not run (it runs f32, bf16, f16)"),
                  std::string::npos) << msg;
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
    }
    EXPECT_NO_THROW(m->require_supported(backend_info("cpu").capabilities(), "cpu"));
}

// The CUDA backend has no mixture-of-experts ops yet: such a model is refused before anything is bound.
TEST(CudaCapabilities, MixtureOfExpertsModelIsRefusedAtLoadTime) {
    const std::string& dir = testing::generated_checkpoint("moe-tiny", 7, DType::F32);
    const std::unique_ptr<Model> m = Model::open(dir);
    try {
        m->require_supported(backend_info("cuda").capabilities(), "cuda");
        ADD_FAILURE() << "a mixture-of-experts model was accepted for cuda";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("a mixture-of-experts model (8 experts), which backend 'cuda' does not run"),
                  std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(m->require_supported(backend_info("cpu").capabilities(), "cpu"));
}

TEST(CudaCli, GenerateSaysWhenCudaIsUnavailable) {
    if (cuda_unavailable().empty()) GTEST_SKIP() << "CUDA is available here";
    const std::string& dir = testing::generated_checkpoint("tiny", 7, DType::F32);
    const auto r = testing::run_tracelm("generate --backend cuda --model " + dir + " --prompt hi --max-tokens 2");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("error: backend 'cuda' is not available: " + cuda_unavailable()), std::string::npos) << r.out;
}

TEST(CudaCli, UnknownBackendIsAUsageError) {
    const std::string& dir = testing::generated_checkpoint("tiny", 7, DType::F32);
    const auto r = testing::run_tracelm("bench --backend tpu --model " + dir);
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("--backend"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tracelm
