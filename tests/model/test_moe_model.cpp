// Loading a Qwen3-MoE checkpoint (per-expert safetensors tensors stacked per layer, or GGUF's stacked ffn_*_exps):
// expert tensors and metadata that disagree are refused naming them, a decode token is counted as reading only its
// chosen experts, an f32 GGUF computes the folder's bits, and quantized experts replay as they run eagerly.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "backends/cpu/cpu_backend.h"
#include "checkpoint/gguf_convert.h"
#include "checkpoint/random_checkpoint.h"
#include "engine/engine.h"
#include "formats/gguf_writer.h"
#include "model/model.h"
#include "support/llamacpp_greedy.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

namespace fs = std::filesystem;

// The moe-tiny checkpoint with its config.json's `field` set to `value`, in `dir`.
std::string edited(const testing::TempDir& dir, const char* field, const nlohmann::json& value) {
    const std::string& src = testing::generated_checkpoint("moe-tiny", 7, DType::F32);
    const fs::path out = dir.str("moe");
    fs::create_directories(out);
    for (const auto& e : fs::directory_iterator(src)) fs::copy(e.path(), out / e.path().filename());
    std::ifstream in(out / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    in.close();
    config[field] = value;
    std::ofstream(out / "config.json") << config.dump();
    return out.string();
}

void expect_load_error(const std::string& path, const std::string& needle) {
    cpu::CpuBackend be(1);
    try {
        Model::load(path, be);
        ADD_FAILURE() << "loaded; expected an error mentioning " << needle;
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(MoeModel, ExpertTensorsThatDisagreeWithTheConfigAreRefusedByName) {
    {
        const testing::TempDir dir;
        expect_load_error(edited(dir, "num_experts", 9), "tensor 'model.layers.0.mlp.gate.weight' in");  // the router

    }
    {
        const testing::TempDir dir;
        expect_load_error(edited(dir, "moe_intermediate_size", 16),
                          "tensor 'model.layers.0.mlp.experts.0.gate_proj.weight' in");
    }
    {
        const testing::TempDir dir;
        expect_load_error(edited(dir, "num_experts_per_tok", 9), "num_experts_per_tok");
    }
}

TEST(MoeModel, ADecodeTokenReadsOnlyItsChosenExperts) {
    cpu::CpuBackend be(1);
    const auto m = Model::load(testing::generated_checkpoint("moe-tiny", 7, DType::F32), be);
    const ModelConfig& c = m->config();
    ASSERT_EQ(c.num_experts, 8);
    ASSERT_EQ(c.num_experts_per_tok, 2);
    const int64_t H = c.hidden_size, MI = c.moe_intermediate_size, q = c.q_dim(), kv = c.kv_dim();
    const int64_t attention = q * H * 2 + kv * H * 2, router = c.num_experts * H, experts = 3 * MI * H;
    const int64_t per_layer = attention + router + experts * c.num_experts_per_tok;
    EXPECT_EQ(m->decode_weight_bytes(),
              static_cast<size_t>((per_layer * c.num_hidden_layers + int64_t{c.vocab_size} * H) * 4));
    for (const LayerWeights& L : m->weights().layers) {
        ASSERT_TRUE(L.experts.has_value());
        EXPECT_EQ(L.experts->gate.rows, c.num_experts * MI);
        EXPECT_EQ(L.experts->down.rows, c.num_experts * H);
    }
}

// Prefill and 8 greedy steps of two prompts: every step's logits and tokens (f32 KV, whatever the file's default).
std::vector<std::vector<float>> run(const Model& m, Backend& be, bool capture, std::vector<int32_t>* tokens) {
    EngineOptions o;
    o.max_seqs = 2;
    o.context = 128;
    o.capture = capture;
    o.kv_dtype = DType::F32;
    Engine e(m, be, o);
    std::vector<std::vector<float>> logits;
    const std::vector<int32_t> first = e.start({{785, 6722, 315, 9625, 374}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}, 10);
    tokens->insert(tokens->end(), first.begin(), first.end());
    for (int i = 0; i < 8; ++i) {
        e.step();
        const std::vector<int32_t> s = e.sampled();
        tokens->insert(tokens->end(), s.begin(), s.end());
        logits.push_back(e.logits());
    }
    return logits;
}

TEST(MoeModel, AnF32GgufComputesTheFoldersBits) {
    const testing::TempDir dir;
    cpu::CpuBackend be(2);
    const auto folder = Model::load(testing::generated_checkpoint("moe-tiny", 7, DType::F32), be);
    const auto gguf = Model::load(testing::random_moe_gguf(dir, DType::F32), be);
    EXPECT_EQ(gguf->config().num_experts, 8);
    EXPECT_EQ(gguf->config().num_experts_per_tok, 2);
    EXPECT_TRUE(gguf->config().norm_topk_prob);
    std::vector<int32_t> a, b;
    EXPECT_EQ(run(*folder, be, true, &a), run(*gguf, be, true, &b));
    EXPECT_EQ(a, b);
}

TEST(MoeModel, QuantizedGgufExpertsReplayAsTheyRunEagerly) {
    const testing::TempDir dir;
    for (const DType dt : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
        const bool k_type = dtype_block_elems(dt) == 256;  // moe-small's widths of 256
        const std::string path = testing::random_moe_gguf(dir, dt, k_type ? "moe-small" : "moe-tiny");
        for (const Numerics n : {Numerics::Ggml, Numerics::Fast}) {
            SCOPED_TRACE(std::string(dtype_name(dt)) + (n == Numerics::Fast ? " fast" : " ggml"));
            cpu::CpuBackend be(2);
            const auto m = Model::load(path, be, {}, n);
            EXPECT_EQ(m->weights().layers[0].experts->gate.dtype, n == Numerics::Fast ? dtype_repacked(dt) : dt);
            std::vector<int32_t> eager, replayed;
            EXPECT_EQ(run(*m, be, false, &eager), run(*m, be, true, &replayed));
            EXPECT_EQ(eager, replayed);
        }
    }
}

TEST(MoeModel, MalformedGgufExpertMetadataIsRefusedNamingTheKey) {
    const testing::TempDir dir;
    ModelConfig c = ModelConfig::from_json_text(R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
        "intermediate_size": 192, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "rms_norm_eps": 1e-6, "vocab_size": 16, "max_position_embeddings": 64})");
    for (const auto& [experts, used, key] : {std::tuple{4, 5, "qwen3moe.expert_used_count"},
                                             std::tuple{0, 1, "qwen3moe.expert_count"}}) {
        c.num_experts = experts;
        c.num_experts_per_tok = used;
        c.moe_intermediate_size = 32;
        GgufWriter w;
        add_arch_metadata(w, "qwen3moe", c);
        w.add_tensor("token_embd.weight", DType::F32, {64, 16}, std::vector<uint8_t>(64 * 16 * 4, 0));
        const std::string path = dir.str("bad.gguf");
        w.write(path);
        try {
            ModelConfig::from_gguf(GgufFile(path));
            ADD_FAILURE() << key << " accepted";
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
        }
    }
}

// llama.cpp's bits on Qwen3-MoE GGUF files in the ggml numerics (testdata/goldens/qwen3_moe_llamacpp.json, from
// scripts/make_moe_llamacpp_goldens.py: llama-cpp-python 0.3.36, repacking off): the moe-tiny files with Q8_0 and
// Q4_0 weights and the moe-small ones with Q4_K and Q6_K (in whose prompt forwards some experts have 8 rows or more,
// ggml's tiled order, and others fewer), an f32 router, four prompts from 1 to 326 tokens each in one forward, 24
// greedy steps; every token and every logit of every step, eager and replayed.
class MoeLlamaCpp : public ::testing::TestWithParam<bool> {};

TEST_P(MoeLlamaCpp, GreedyContinuationsAndLogitsAreLlamaCpps) {
    std::ifstream f(testing::repo_path("testdata/goldens/qwen3_moe_llamacpp.json"));
    const auto g = nlohmann::json::parse(f);
    ASSERT_FALSE(g["use_extra_bufts"].get<bool>());
    ASSERT_EQ(g["files"].size(), 4u);
    const std::map<std::string, DType> types = {
        {"q8_0", DType::Q8_0}, {"q4_0", DType::Q4_0}, {"q4_k", DType::Q4_K}, {"q6_k", DType::Q6_K}};
    for (const auto& file : g["files"]) {
        const DType dt = types.at(file["dtype"].get<std::string>());
        const std::string geometry = file["geometry"].get<std::string>();
        SCOPED_TRACE(geometry + " " + std::string(dtype_name(dt)));
        const testing::TempDir dir;
        const std::string path = testing::random_moe_gguf(dir, dt, geometry);
        char digest[17];
        std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(fnv1a64_file(path)));
        ASSERT_EQ(digest, file["gguf_fnv1a64"].get<std::string>()) << "not the file the goldens were made from";
        cpu::CpuBackend be(2);
        const auto model = Model::load(path, be);
        EngineOptions opt;
        opt.capture = GetParam();
        opt.context = g["n_ctx"].get<int>();
        opt.prefill_chunk = g["n_ubatch"].get<int>();
        Engine engine(*model, be, opt);
        for (const auto& r : file["records"]) {
            const auto prompt = r["prompt_ids"].get<std::vector<int32_t>>();
            const auto want = r["tokens"].get<std::vector<int32_t>>();
            const auto want_hashes = r["logits_fnv1a64"].get<std::vector<std::string>>();
            const testing::GreedySteps got = testing::greedy_steps(engine, prompt, want.size());
            EXPECT_EQ(got.tokens, want) << prompt.size() << "-token prompt";
            for (size_t i = 0; i < want.size(); ++i)
                ASSERT_EQ(got.hashes[i], want_hashes[i]) << prompt.size() << "-token prompt: the logits of step " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Decode, MoeLlamaCpp, ::testing::Bool(), [](const auto& p) { return p.param ? "replay" : "eager"; });

}  // namespace
}  // namespace tracelm
