// The tiny Qwen3 geometry's decoder on the Vulkan backend (skipped without a device): a prompt forward, then decode
// steps that stay on the device (argmax, advance_decode), eagerly and as one recorded command buffer submitted for
// every step, against the same steps on the CPU backend, driving the Decoder directly; then the Engine (sampling on
// the device) against the CPU's engine, on the tiny checkpoint, random K-type GGUF models, the qwen3-0.6b geometry
// (bf16) and the real SmolLM2-135M and Gemma 3 270M.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/registry.h"
#include "checkpoint/gguf_convert.h"
#include "engine/engine.h"
#include "kv/paged_kv_cache.h"
#include "model/decoder.h"
#include "model/model.h"
#include "support/test_support.h"
#ifdef TRACELM_HAVE_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#endif

namespace tracelm {
namespace {

// Greedy ids and logits of a prompt forward and `steps` decode steps of one sequence.
struct Greedy {
    std::vector<int32_t> ids;
    std::vector<std::vector<float>> logits;
    uint64_t uploads_per_step = 0;
};

Greedy greedy(Backend& be, const std::string& dir, const std::vector<int32_t>& prompt, int steps, bool capture) {
    const auto model = Model::load(dir, be);
    const ModelConfig& c = model->config();
    const int block = 16, blocks = 4, T = static_cast<int>(prompt.size());
    PagedKvCache kv(be, c.num_hidden_layers, c.kv_dim(), blocks, block, DType::F32);
    Decoder dec(*model, be, kv, T, 1);
    std::vector<Buffer*> bufs;
    const auto i32 = [&](const std::string& name, int64_t rows, int64_t cols, const std::vector<int32_t>& v) {
        bufs.push_back(be.alloc(v.size() * 4, name));
        const Tensor t = whole(bufs.back(), DType::I32, rows, cols);
        be.upload(t, v.data());
        return t;
    };
    std::vector<int32_t> positions(prompt.size());
    for (int i = 0; i < T; ++i) positions[static_cast<size_t>(i)] = i;
    const Tensor ids = i32("ids", 1, T, prompt), pos = i32("pos", 1, T, positions), slots = i32("slots", 1, T, positions);
    const Tensor tables = i32("tables", 1, blocks, {0, 1, 2, 3}), lens = i32("lens", 1, 1, {T});
    const Tensor qsl = i32("qsl", 1, 2, {0, T}), step = i32("step", 1, 1, {0});
    const Tensor history = i32("history", steps + 1, 1, std::vector<int32_t>(static_cast<size_t>(steps + 1), -1));
    const Tensor sampled = i32("sampled", 1, 1, {0});
    const StepInputs in{ids, pos, slots, AttentionMeta{tables, lens, qsl, 1, block}, slots, tables};
    dec.forward(in, T);
    Greedy g;
    const auto read_logits = [&] {
        g.logits.emplace_back(static_cast<size_t>(c.vocab_size));
        be.download(dec.logits(1), g.logits.back().data());
    };
    read_logits();
    // Decode: one token of the sequence per step, its inputs advanced on the device from the prompt's last token.
    const Tensor one_slot = i32("slot", 1, 1, {T - 1});
    const StepInputs one{i32("id", 1, 1, {0}), i32("position", 1, 1, {T - 1}), one_slot,
                         AttentionMeta{tables, lens, i32("qsl1", 1, 2, {0, 1}), 1, block}, one_slot, tables};
    DecodeState st;
    st.token_ids = one.token_ids;
    st.positions = one.positions;
    st.slot_mapping = one.slot_mapping;
    st.seq_lens = lens;
    st.block_tables = tables;
    st.step = step;
    st.history = history;
    st.block_size = block;
    const auto decode_step = [&] {
        be.argmax(dec.logits(1), sampled);
        be.advance_decode(sampled, st);
        dec.forward(one, 1);
    };
    // The first step runs eagerly (it sizes any scratch, as the engine's warm-up does); a captured run records the
    // step once and submits it for the others.
    decode_step();
    read_logits();
    GraphId graph = -1;
    if (capture) {
        be.begin_capture();
        decode_step();
        graph = be.end_capture();
    }
    const uint64_t uploads = be.uploads();
    for (int s = 1; s < steps; ++s) {
        if (capture) {
            be.replay(graph);
        } else {
            decode_step();
        }
        read_logits();
    }
    g.uploads_per_step = (be.uploads() - uploads) / static_cast<uint64_t>(std::max(steps - 1, 1));
    if (capture) be.destroy_graph(graph);
    g.ids.resize(static_cast<size_t>(steps + 1));
    be.download(history, g.ids.data());
    for (Buffer* b : bufs) be.free(b);
    return g;
}

std::unique_ptr<Backend> vulkan_or_skip() {
    const std::string why = backend_info("vulkan").unavailable();
    if (!why.empty()) return nullptr;
    return make_backend("vulkan");
}

// f32 weights (bf16 would need TRACELM_ISA=avx2 on AVX512_BF16 CPUs, docs/cuda.md). Logits within 1e-4 of the
// step's largest (f32 sums in another order through every layer), the same greedy ids (the random model's top-2
// margins here are far wider than that), and the replayed command buffer gives the eager steps' bits with no host
// write between steps.
TEST(VulkanDecode, TinyGreedyFollowsTheCpuAndReplayEqualsEager) {
    const std::unique_ptr<Backend> vk = vulkan_or_skip();
    if (!vk) GTEST_SKIP() << backend_info("vulkan").unavailable();
    const std::string& dir = testing::generated_checkpoint("tiny", 11, DType::F32);
    const std::vector<int32_t> prompt = {785, 6722, 315, 9625, 374, 11, 1879};
    const int steps = 8;
    const std::unique_ptr<Backend> cpu = make_backend("cpu");
    const Greedy want = greedy(*cpu, dir, prompt, steps, false);
    const Greedy eager = greedy(*vk, dir, prompt, steps, false);
    const Greedy replayed = greedy(*vk, dir, prompt, steps, true);
    ASSERT_EQ(want.logits.size(), eager.logits.size());
    for (size_t s = 0; s < want.logits.size(); ++s) {
        float scale = 0.0f, err = 0.0f;
        for (size_t i = 0; i < want.logits[s].size(); ++i) {
            scale = std::max(scale, std::abs(want.logits[s][i]));
            err = std::max(err, std::abs(want.logits[s][i] - eager.logits[s][i]));
        }
        EXPECT_LE(err, 1e-4f * scale) << "step " << s;
    }
    EXPECT_EQ(eager.ids, want.ids);
    EXPECT_EQ(replayed.ids, eager.ids);
    EXPECT_EQ(replayed.logits, eager.logits);
    EXPECT_EQ(replayed.uploads_per_step, 0u);
}

// The engine's tokens over `steps` decode steps of three sequences, and the host writes of the steady-state steps
// (after the eager warm-up and the capture).
struct EngineRun {
    std::vector<std::vector<int32_t>> tokens;
    uint64_t steady_uploads = 0;
    // Host allocations of the steady-state steps on the stepping thread, and those of them the Vulkan driver made.
    uint64_t steady_allocations = 0, steady_driver_allocations = 0;
    int replays = 0;
};

EngineRun run_engine(Backend& be, const std::string& dir, const std::vector<sampling::RowParams>& params, int steps) {
    const auto model = Model::load(dir, be);
    EngineOptions opt;
    opt.max_seqs = 3;
    opt.context = 128;
    Engine engine(*model, be, opt);
    EngineRun r;
    r.tokens.push_back(engine.start({{785, 6722, 315, 9625, 374}, {9707, 11, 1879}, {42, 7, 7, 9}}, steps + 1, params));
    uint64_t uploads = 0;
    const auto driver_allocations = [&be]() -> uint64_t {
#ifdef TRACELM_HAVE_VULKAN
        if (dynamic_cast<const vulkan::VulkanBackend*>(&be) != nullptr)
            return vulkan::VulkanBackend::driver_allocations_on_this_thread();
#endif
        return 0;
    };
    for (int i = 0; i < steps; ++i) {
        if (i == 2) uploads = be.uploads();
        // This thread's: lavapipe's worker threads allocate on their own while they run the step.
        const uint64_t allocations = testing::thread_heap_allocations(), driver = driver_allocations();
        engine.step();
        if (i >= 2) {
            r.steady_allocations += testing::thread_heap_allocations() - allocations;
            r.steady_driver_allocations += driver_allocations() - driver;
        }
        r.tokens.push_back(engine.sampled());
    }
    r.steady_uploads = be.uploads() - uploads;
    r.replays = engine.replays();
    engine.finish();
    return r;
}

// The engine on Vulkan (sampling on the device, decode replayed from one recorded command buffer) gives the CPU
// engine's tokens, greedy and seeded (temperature, top-k, top-p, min-p, penalties), and its steady-state steps write
// nothing from the host and allocate nothing but the driver's own records.
TEST(VulkanDecode, EngineGreedyAndSeededTokensEqualTheCpusWithNoHostWrites) {
    const std::unique_ptr<Backend> vk = vulkan_or_skip();
    if (!vk) GTEST_SKIP() << backend_info("vulkan").unavailable();
    const std::string& dir = testing::generated_checkpoint("tiny", 11, DType::F32);
    const std::unique_ptr<Backend> cpu = make_backend("cpu");
    const int steps = 6;
    sampling::RowParams seeded;
    seeded.temperature = 0.9f;
    seeded.top_k = 50;
    seeded.top_p = 0.95f;
    seeded.min_p = 0.01f;
    seeded.repetition_penalty = 1.1f;
    seeded.presence_penalty = 0.3f;
    seeded.seed_lo = 1234;
    sampling::RowParams warm = seeded;
    warm.top_k = 0;
    warm.temperature = 1.3f;
    warm.seed_lo = 99;
    // Rows: greedy, seeded, and seeded without top-k (batch bucket 4: one inert row).
    const std::vector<sampling::RowParams> params = {sampling::RowParams{}, seeded, warm};
    const EngineRun want = run_engine(*cpu, dir, params, steps);
    const EngineRun got = run_engine(*vk, dir, params, steps);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.replays, steps - 1);
    EXPECT_EQ(got.steady_uploads, 0u);
    // Every host allocation of a steady step on this thread is the driver's own (lavapipe allocates a record in each
    // vkQueueSubmit): tracelm allocates nothing, on the CPU either.
    EXPECT_EQ(got.steady_allocations, got.steady_driver_allocations);
    EXPECT_EQ(want.steady_allocations, 0u);
}

// One sequence of `model_path` decoded greedily: its tokens (the first sampled, then `steps`) and the last logits.
std::pair<std::vector<int32_t>, std::vector<float>> greedy_run(Backend& be, const std::string& model_path,
                                                              const std::vector<int32_t>& prompt, int steps,
                                                              int64_t context) {
    const auto model = Model::load(model_path, be);
    EngineOptions opt;
    opt.context = context;
    Engine engine(*model, be, opt);
    std::vector<int32_t> tokens = {engine.start({prompt}, steps + 1)[0]};
    for (int i = 0; i < steps; ++i) {
        engine.step();
        tokens.push_back(engine.sampled()[0]);
    }
    std::vector<float> logits = engine.logits();
    engine.finish();
    return {tokens, logits};
}

// The same tokens, and logits within `bound` of the largest of `want`'s.
void expect_same_tokens_near_logits(const std::pair<std::vector<int32_t>, std::vector<float>>& got,
                                    const std::pair<std::vector<int32_t>, std::vector<float>>& want, float bound,
                                    std::string_view what) {
    EXPECT_EQ(got.first, want.first) << what;
    ASSERT_EQ(got.second.size(), want.second.size()) << what;
    float scale = 0.0f, err = 0.0f;
    for (size_t i = 0; i < want.second.size(); ++i) {
        scale = std::max(scale, std::abs(want.second[i]));
        err = std::max(err, std::abs(want.second[i] - got.second[i]));
    }
    EXPECT_LE(err, bound * scale) << what;
}

// Random qwen3 GGUF models whose every matrix, the embedding table included, is one K type (make_random_gguf): the
// engine on Vulkan gives the CPU engine's greedy tokens (7 steps). The 8-token prompt's products take ggml's tiled
// order (batch_rows 8), the decode steps vec_dot's. The matmuls are the CPU's bits (the op conformance suite), but
// rms_norm and the attention over the f16 cache sum in this backend's own order, and an ulp there can move an 8-bit
// activation by a step (1/127 of its block's largest): the last logits are held within 2.5e-2 of the largest (measured
// 0.6% to 1.3%; Q8_0 weights, by the same mechanism, 1.6%).
TEST(VulkanDecode, KTypeModelsGiveTheCpusTokens) {
    const std::unique_ptr<Backend> vk = vulkan_or_skip();
    if (!vk) GTEST_SKIP() << backend_info("vulkan").unavailable();
    const std::unique_ptr<Backend> cpu = make_backend("cpu");
    const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79};
    const int steps = 6;
    for (const DType dt : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        const std::string path = testing::temp_path("vulkan-qwen3-" + std::string(dtype_name(dt)) + ".gguf");
        make_random_gguf("qwen3", dt, 1, path);
        expect_same_tokens_near_logits(greedy_run(*vk, path, prompt, steps, 64), greedy_run(*cpu, path, prompt, steps, 64),
                                       2.5e-2f, dtype_name(dt));
        std::filesystem::remove(path);
    }
}

// The qwen3-0.6b geometry in bf16 (random weights): its 311 MB embedding table, tied as the LM head, is more than
// lavapipe's 128 MiB binding limit (maxStorageBufferRange), so the embedding and the logits read it in windows of
// rows (vulkan_backend.cpp: weight_windows). The engine on Vulkan gives the CPU engine's greedy tokens for a 4-token
// prompt and 3 steps, the last logits within 1e-3 of the largest (bf16 products in this backend's own order through
// 28 layers). Against the CPU's AVX2 kernels: ctest runs it with TRACELM_ISA=avx2 (with AVX512_BF16 the CPU rounds
// activations to bf16, docs/cuda.md). A model-level test (CI's Release stage only).
TEST(VulkanQwen3_06b, GreedyTokensEqualTheCpus) {
    const std::unique_ptr<Backend> vk = vulkan_or_skip();
    if (!vk) GTEST_SKIP() << backend_info("vulkan").unavailable();
    const std::string& dir = testing::generated_checkpoint("qwen3-0.6b", 1, DType::BF16);
    const std::vector<int32_t> prompt = {3, 14, 15, 92};
    const std::unique_ptr<Backend> cpu = make_backend("cpu");
    expect_same_tokens_near_logits(greedy_run(*vk, dir, prompt, 3, 32), greedy_run(*cpu, dir, prompt, 3, 32), 1e-3f,
                                   "qwen3-0.6b");
}

// A real GGUF model on Vulkan gives the CPU engine's greedy tokens, which are llama.cpp's (`goldens` records): two
// records' prompts at once, an eager prefill, a warm-up step, then replayed steps, 5 tokens, where llama.cpp's top-2
// margins are at least `min_margin` (attention and norms sum in this backend's own order, which may part the two at a
// near-tie only). Few tokens, for lavapipe's time.
void expect_llamacpp_tokens_on_vulkan(const std::string& model_path, const std::string& goldens,
                                      std::array<int, 2> records, double min_margin) {
    const std::unique_ptr<Backend> vk = vulkan_or_skip();
    if (!vk) GTEST_SKIP() << backend_info("vulkan").unavailable();
    std::ifstream f(testing::repo_path(goldens));
    const auto g = nlohmann::json::parse(f);
    const int tokens = 5;
    std::vector<std::vector<int32_t>> prompts, llamacpp(tokens);
    for (const int r : records) {
        const auto& margins = g["records"][r]["top2_margin"];
        for (int i = 0; i < tokens; ++i) {
            ASSERT_GE(margins[i].get<double>(), min_margin) << "record " << r << " step " << i;
            llamacpp[i].push_back(g["records"][r]["tokens"][i].get<int32_t>());
        }
        prompts.push_back(g["records"][r]["prompt_ids"].get<std::vector<int32_t>>());
    }
    const auto run = [&](Backend& be) {
        const auto model = Model::load(model_path, be);
        EngineOptions opt;
        opt.max_seqs = 2;
        opt.context = 64;
        Engine engine(*model, be, opt);
        std::vector<std::vector<int32_t>> out = {engine.start(prompts, tokens)};
        for (int i = 1; i < tokens; ++i) {
            engine.step();
            out.push_back(engine.sampled());
        }
        EXPECT_EQ(engine.replays(), tokens - 2);
        engine.finish();
        return out;
    };
    const std::unique_ptr<Backend> cpu = make_backend("cpu");
    const auto want = run(*cpu);
    ASSERT_EQ(want, llamacpp);  // the reference holds here too
    EXPECT_EQ(run(*vk), want);
}

// SmolLM2-135M-Instruct (Q4_1, f16 KV cache; the CPU's tokens are llama.cpp's, tests/model/test_smollm2.cpp):
// "The capital of France is" and "1, 2, 3, 4, 5,", margins of at least 0.27 (about 10 s).
TEST(VulkanSmolLM2, GreedyTokensEqualTheCpus) {
    TRACELM_NEED_SMOLLM2();
    expect_llamacpp_tokens_on_vulkan(testing::smollm2_gguf_path(), "testdata/goldens/smollm2_greedy.json", {0, 3}, 0.25);
}

// Gemma 3 270M (Q4_K_M): its 178 MB embedding table, tied as the LM head, is more than lavapipe's 128 MiB binding
// limit, so it is read in windows (vulkan_backend.cpp: weight_windows). Two chats of
// testdata/goldens/gemma3_greedy_norepack.json (16 and 17 tokens: inside the 512-token sliding window, which drops
// nothing here), margins of at least 0.9. A model-level test (CI's Release stage only).
TEST(VulkanGemma3, GreedyTokensEqualTheCpus) {
    TRACELM_NEED_GEMMA3();
    expect_llamacpp_tokens_on_vulkan(testing::gemma3_gguf_path(), "testdata/goldens/gemma3_greedy_norepack.json", {3, 4},
                                     0.9);
}

}  // namespace
}  // namespace tracelm
