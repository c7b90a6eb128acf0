// DeepSeek-V3.2 and V3 from GGUF files written by llama.cpp's own converter (convert_hf_to_gguf.py; how, in
// testdata/models/tiny-deepseek-gguf/README.md) from testdata/models/tiny-deepseek-v32: the same configuration, and
// the same greedy tokens and logits, bit for bit, as the folder they came from (f32 both, so every load-time transform
// of the two paths must give identical weights); the converter's Q8_0 file near the f32 one; and DeepSeek GGUFs whose
// metadata is not what the converter writes are refused naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "formats/gguf_writer.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

std::string folder() { return testing::repo_path("testdata/models/tiny-deepseek-v32"); }
std::string v32_gguf() { return testing::repo_path("testdata/models/tiny-deepseek-gguf/tiny-deepseek-v32-f32.gguf"); }
std::string v3_gguf() { return testing::repo_path("testdata/models/tiny-deepseek-gguf/tiny-deepseek-v3-f32.gguf"); }

std::vector<std::vector<int32_t>> prompts() {
    std::ifstream f(folder() + "/reference_goldens.json");
    const nlohmann::json goldens = nlohmann::json::parse(f);
    std::vector<std::vector<int32_t>> out;
    for (const auto& p : goldens["sparse"]["prompts"]) out.push_back(p["prompt"].get<std::vector<int32_t>>());
    return out;
}

struct GgufRun {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<float>> logits;  // every step's, one prompt after another
};

// Each prompt alone, greedy, 8 tokens, in an engine of 4-token blocks and 6-token prefill chunks (as
// test_deepseek.cpp's) so that sequences span blocks and prefill takes several forwards.
GgufRun run_gguf(const std::string& path, bool dense) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(path, be);
    EngineOptions opt;
    opt.context = 64;
    opt.block_size = 4;
    opt.prefill_chunk = 6;
    opt.max_seqs = 1;
    opt.dense_attention = dense;
    Engine engine(*model, be, opt);
    GgufRun r;
    for (const auto& p : prompts()) {
        std::vector<int32_t> tokens = {engine.start({p}, 8)[0]};
        std::vector<float> logits = engine.logits();
        for (int i = 0; i < 7; ++i) {
            engine.step();
            tokens.push_back(engine.sampled()[0]);
            const std::vector<float> l = engine.logits();
            logits.insert(logits.end(), l.begin(), l.end());
        }
        engine.finish();
        r.tokens.push_back(tokens);
        r.logits.push_back(logits);
    }
    return r;
}

void expect_same_run(const GgufRun& got, const GgufRun& want) {
    ASSERT_EQ(want.tokens.size(), 4u);  // the goldens' four prompts
    ASSERT_EQ(got.tokens.size(), want.tokens.size());
    for (size_t i = 0; i < want.tokens.size(); ++i) {
        EXPECT_EQ(got.tokens[i], want.tokens[i]) << "prompt " << i;
        EXPECT_TRUE(got.logits[i] == want.logits[i]) << "prompt " << i << ": logits differ";
    }
}

TEST(DeepseekGguf, ConfigIsTheFolders) {
    const ModelConfig f = Model::open(folder())->config();
    for (const std::string& path : {v32_gguf(), v3_gguf()}) {
        SCOPED_TRACE(path);
        const ModelConfig g = Model::open(path)->config();
        ASSERT_TRUE(g.mla);
        EXPECT_EQ(g.arch, Arch::Deepseek);
        EXPECT_EQ(g.num_hidden_layers, f.num_hidden_layers);
        EXPECT_EQ(g.num_key_value_heads, f.num_key_value_heads);
        EXPECT_EQ(g.head_dim, f.head_dim);
        EXPECT_EQ(g.intermediate_size, f.intermediate_size);
        EXPECT_EQ(g.vocab_size, f.vocab_size);
        EXPECT_EQ(g.rms_norm_eps, f.rms_norm_eps);
        EXPECT_EQ(g.rope_factors(), f.rope_factors());
        EXPECT_EQ(g.attention_scale(), f.attention_scale());
        EXPECT_EQ(g.layer_moe, f.layer_moe);
        EXPECT_EQ(g.num_experts, f.num_experts);
        EXPECT_EQ(g.num_experts_per_tok, f.num_experts_per_tok);
        EXPECT_EQ(g.moe_intermediate_size, f.moe_intermediate_size);
        EXPECT_EQ(g.norm_topk_prob, f.norm_topk_prob);
        const ModelConfig::Mla &a = *g.mla, &b = *f.mla;
        EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
        EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
        EXPECT_EQ(a.qk_nope_head_dim, b.qk_nope_head_dim);
        EXPECT_EQ(a.qk_rope_head_dim, b.qk_rope_head_dim);
        EXPECT_EQ(a.v_head_dim, b.v_head_dim);
        EXPECT_EQ(a.n_group, b.n_group);
        EXPECT_EQ(a.topk_group, b.topk_group);
        EXPECT_EQ(a.n_shared_experts, b.n_shared_experts);
        EXPECT_EQ(a.routed_scaling_factor, b.routed_scaling_factor);
        const bool v32 = path == v32_gguf();
        EXPECT_EQ(a.index_n_heads, v32 ? b.index_n_heads : 0);
        EXPECT_EQ(a.index_head_dim, v32 ? b.index_head_dim : 0);
        EXPECT_EQ(a.index_topk, v32 ? b.index_topk : 0);
    }
}

class DeepseekGgufRuns : public ::testing::TestWithParam<bool> {};

TEST_P(DeepseekGgufRuns, V32GivesTheFoldersTokensAndLogitsBitForBit) {
    expect_same_run(run_gguf(v32_gguf(), GetParam()), run_gguf(folder(), GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Tiny, DeepseekGgufRuns, ::testing::Bool(),
                         [](const auto& p) { return std::string(p.param ? "dense" : "sparse"); });

// The V3 file is the same checkpoint without the indexer, converted as DeepseekV3ForCausalLM: it attends densely,
// as the V3.2 folder does with --dense-attention.
TEST(DeepseekGguf, V3GivesTheFoldersDenseTokensAndLogitsBitForBit) {
    expect_same_run(run_gguf(v3_gguf(), false), run_gguf(folder(), true));
}

// The V3.2 fixture rewritten with `edit` applied to its metadata (edit returns true for a key it wrote or dropped
// itself) and, when given, `tensor` choosing how each tensor is written; returns the copy's path.
std::string rewritten(const std::string& name, const std::function<bool(std::string_view, GgufWriter&)>& edit,
                      const std::function<bool(const GgufTensor&, GgufWriter&)>& tensor = {}) {
    const GgufFile g(v32_gguf());
    GgufWriter w;
    for (const GgufKeyValue& kv : g.metadata()) {
        if (edit(kv.key, w)) continue;
        const std::string k(kv.key);
        switch (kv.value.type) {
            case GgufType::U32: w.add_u32(k, g.get_u32(k)); break;
            case GgufType::F32: w.add_f32(k, g.get_f32(k)); break;
            case GgufType::Bool: w.add_bool(k, g.get_bool(k)); break;
            case GgufType::String: w.add_string(k, std::string(g.get_string(k))); break;
            case GgufType::Array:
                if (kv.value.elem_type == GgufType::String) {
                    const auto v = g.get_string_array(k);
                    w.add_string_array(k, std::vector<std::string>(v.begin(), v.end()));
                } else {
                    w.add_i32_array(k, g.get_i32_array(k));
                }
                break;
            default: ADD_FAILURE() << "unexpected metadata type of " << k;
        }
    }
    for (const GgufTensor& t : g.tensors()) {
        if (tensor && tensor(t, w)) continue;
        const auto* b = static_cast<const uint8_t*>(t.data);
        w.add_tensor(std::string(t.name), t.require_dtype(), t.dims, std::vector<uint8_t>(b, b + t.bytes));
    }
    const std::string path = testing::temp_path(name);
    w.write(path);
    return path;
}

void expect_refused(const std::string& path, const std::string& what) {
    cpu::CpuBackend be(1);
    try {
        Model::load(path, be);
        ADD_FAILURE() << "no error, expected one containing: " << what;
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    std::filesystem::remove(path);
}

TEST(DeepseekGguf, MetadataTheConverterWouldNotWriteIsRefusedNamingTheKey) {
    const auto drop = [](std::string_view key) {
        return [key](std::string_view k, GgufWriter&) { return k == key; };
    };
    const auto set_u32 = [](std::string_view key, uint32_t v) {
        return [key, v](std::string_view k, GgufWriter& w) {
            if (k != key) return false;
            w.add_u32(std::string(k), v);
            return true;
        };
    };
    // A copy with nothing changed loads: the rewriting itself breaks nothing.
    {
        cpu::CpuBackend be(1);
        const std::string same = rewritten("ds-same.gguf", [](std::string_view, GgufWriter&) { return false; });
        EXPECT_NO_THROW(Model::load(same, be));
        std::filesystem::remove(same);
    }
    expect_refused(rewritten("ds-no-topk.gguf", drop("deepseek32.attention.indexer.top_k")),
                   "missing metadata key 'deepseek32.attention.indexer.top_k'");
    expect_refused(rewritten("ds-no-q-lora.gguf", drop("deepseek32.attention.q_lora_rank")),
                   "missing metadata key 'deepseek32.attention.q_lora_rank'");
    expect_refused(rewritten("ds-kv-lora.gguf", set_u32("deepseek32.attention.kv_lora_rank", 16)),
                   "'deepseek32.attention.key_length' is 40, but 'deepseek32.attention.kv_lora_rank'");
    expect_refused(rewritten("ds-softmax.gguf", set_u32("deepseek32.expert_gating_func", 1)),
                   "metadata 'deepseek32.expert_gating_func' must be 2 (sigmoid)");
    expect_refused(rewritten("ds-no-gating.gguf", drop("deepseek32.expert_gating_func")),
                   "missing metadata key 'deepseek32.expert_gating_func'");
    expect_refused(rewritten("ds-groups.gguf", set_u32("deepseek32.expert_group_count", 3)),
                   "metadata 'deepseek32.expert_group_count': 3 groups of at least 2 of 8 experts are not possible");
    expect_refused(rewritten("ds-attn-factor.gguf",
                             [](std::string_view k, GgufWriter& w) {
                                 if (k == "deepseek32.rope.scaling.factor") w.add_f32("deepseek32.rope.scaling.yarn_attn_factor", 1.0f);
                                 return false;
                             }),
                   "metadata 'deepseek32.rope.scaling.yarn_attn_factor' is not supported");
    expect_refused(rewritten("ds-kv-heads.gguf", set_u32("deepseek32.attention.head_count_kv", 4)),
                   "metadata 'deepseek32.attention.head_count_kv' must be in [1, 1], got 4");
}

// The converter's Q8_0 file (every matrix Q8_0 but attn_k_b, whose 16-value rows it keeps f16): attn_v_b, which
// mla_absorb needs in floats, is dequantized at load to within half a Q8_0 step of the f32 file's (each block of 32
// stores round(w / d) with d = max|w| / 127, and d as f16), and the model runs end to end near the f32 file, with dense
// attention: the same first token for every prompt, prefill logits within 5% of their range at the median and 25% at
// most. Loose, because discrete choices amplify the quantization error (about 0.4% per weight and activation) in this
// random tiny model: the router's near-tied top-2 of 8 experts picks another expert for some tokens (prompt 0's
// logits move by up to 15% of their range), as does the indexer's top-8 with sparse attention. A wrong layout or
// dequantization moves them by the whole range.
TEST(DeepseekGguf, Q8_0FileFromTheConverterRunsNearTheF32One) {
    const std::string q8 = testing::repo_path("testdata/models/tiny-deepseek-gguf/tiny-deepseek-v32-q8_0.gguf");
    {
        cpu::CpuBackend be(1);
        const auto quantized = Model::load(q8, be), full = Model::load(v32_gguf(), be);
        EXPECT_EQ(quantized->weight_dtype(), DType::Q8_0);
        for (size_t l = 0; l < full->weights().layers.size(); ++l) {
            const Tensor& uv = quantized->weights().layers[l].mla->uv;
            ASSERT_EQ(uv.dtype, DType::F32);
            const Tensor& full_uv = full->weights().layers[l].mla->uv;
            std::vector<float> got(static_cast<size_t>(uv.numel())), want(static_cast<size_t>(full_uv.numel()));
            be.download(uv, got.data());
            be.download(full_uv, want.data());
            ASSERT_EQ(got.size(), want.size());
            for (size_t b = 0; b < want.size(); b += 32) {
                float amax = 0.0f;
                for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::abs(want[i]));
                // q = round(w / d) with d = amax / 127, then d stored as f16: off by d / 2 plus |q| times d's rounding.
                const double d = amax / 127.0, d16 = f16_to_f32(f32_to_f16(static_cast<float>(d)));
                const double bound = 0.5 * d + 127.0 * std::abs(d - d16) + 1e-7;
                for (size_t i = b; i < b + 32; ++i)
                    EXPECT_LE(std::abs(got[i] - want[i]), bound) << "layer " << l << " value " << i;
            }
        }
    }
    const GgufRun got = run_gguf(q8, true), want = run_gguf(v32_gguf(), true);
    const int64_t V = static_cast<int64_t>(want.logits[0].size()) / 8;
    for (size_t p = 0; p < want.tokens.size(); ++p) {
        EXPECT_EQ(got.tokens[p][0], want.tokens[p][0]) << "prompt " << p;
        const auto [lo, hi] = std::minmax_element(want.logits[p].begin(), want.logits[p].begin() + V);
        std::vector<float> d(static_cast<size_t>(V));
        for (int64_t i = 0; i < V; ++i) d[static_cast<size_t>(i)] = std::abs(got.logits[p][i] - want.logits[p][i]);
        EXPECT_LE(*std::max_element(d.begin(), d.end()), 0.25f * (*hi - *lo)) << "prompt " << p;
        std::nth_element(d.begin(), d.begin() + V / 2, d.end());
        EXPECT_LE(d[static_cast<size_t>(V / 2)], 0.05f * (*hi - *lo)) << "prompt " << p;
    }
}

}  // namespace
}  // namespace tracelm
