// ModelConfig parsing: real-world configs and every kind of invalid field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"
#include "runtime/rope.h"

namespace tracelm {
namespace {

using nlohmann::json;

// Qwen/Qwen3-0.6B's config.json as published.
const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Our tiny random checkpoint's config after a round trip through transformers 5.24's
// AutoConfig.from_pretrained + save_pretrained.
const char* kTinyResavedByTransformersV5 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "dtype": "float32", "eos_token_id": 151645, "head_dim": 32, "hidden_act": "silu",
  "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 192,
  "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 4096, "max_window_layers": 2,
  "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "pad_token_id": null, "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
  "sliding_window": null, "tie_word_embeddings": true, "transformers_version": "5.24.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936
})";

// A Llama-3-style config: eos list, no head_dim, no kv default needed.
json llama() {
    return json::parse(R"({
      "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192,
      "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
      "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "vocab_size": 128256,
      "max_position_embeddings": 8192, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "hidden_act": "silu", "mlp_bias": false,
      "attention_bias": false, "rope_scaling": null})");
}

ModelConfig parse(const json& j) { return ModelConfig::from_json_text(j.dump(), "test/config.json"); }

// Expects parsing to fail with a message naming the source file and containing `needle`.
void expect_error(const json& j, const std::string& needle) {
    try {
        parse(j);
        ADD_FAILURE() << "accepted " << j.dump() << " (expected an error mentioning '" << needle << "')";
    } catch (const std::runtime_error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
        EXPECT_NE(msg.find("test/config.json"), std::string::npos) << "message: " << msg;
    }
}

TEST(ModelConfig, ParsesQwen3_06B) {
    const ModelConfig c = ModelConfig::from_json_text(kQwen3_06B);
    EXPECT_EQ(c.arch, Arch::Qwen3);
    EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
    EXPECT_EQ(c.hidden_size, 1024);
    EXPECT_EQ(c.intermediate_size, 3072);
    EXPECT_EQ(c.num_hidden_layers, 28);
    EXPECT_EQ(c.num_attention_heads, 16);
    EXPECT_EQ(c.num_key_value_heads, 8);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.q_dim(), 2048);
    EXPECT_EQ(c.kv_dim(), 1024);
    EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.vocab_size, 151936);
    EXPECT_EQ(c.max_position_embeddings, 40960);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.bos_token_id, 151643);
    EXPECT_EQ(c.eos_token_ids, std::vector<int>{151645});
    EXPECT_EQ(c.torch_dtype, "bfloat16");
    EXPECT_EQ(arch_name(c.arch), "qwen3");
}

TEST(ModelConfig, ParsesConfigSavedByTransformersV5) {
    const ModelConfig c = ModelConfig::from_json_text(kTinyResavedByTransformersV5);
    EXPECT_EQ(c.arch, Arch::Qwen3);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.torch_dtype, "float32");
    EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(ModelConfig, ParsesLlamaWithEosListAndDerivedHeadDim) {
    const ModelConfig c = parse(llama());
    EXPECT_EQ(c.arch, Arch::Llama);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.num_key_value_heads, 8);
    EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
    EXPECT_EQ(c.rope_theta, 500000.0);
    EXPECT_FALSE(c.qk_norm);
    EXPECT_FALSE(c.attention_bias);
}

TEST(ModelConfig, AbsentOrNullFieldsTakeTheirDefaults) {
    json j = llama();
    for (const char* k : {"num_key_value_heads", "rope_theta", "tie_word_embeddings", "attention_bias", "bos_token_id",
                          "eos_token_id", "torch_dtype", "hidden_act", "mlp_bias", "rope_scaling"})
        j.erase(k);
    ModelConfig c = parse(j);
    EXPECT_EQ(c.num_key_value_heads, 32);
    EXPECT_EQ(c.rope_theta, 10000.0);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_FALSE(c.bos_token_id.has_value());
    EXPECT_TRUE(c.eos_token_ids.empty());
    EXPECT_EQ(c.torch_dtype, "");

    // null means "default" too, as HF writes it.
    j["num_key_value_heads"] = nullptr;
    j["head_dim"] = nullptr;
    c = parse(j);
    EXPECT_EQ(c.num_key_value_heads, 32);
    EXPECT_EQ(c.head_dim, 64);

    // Qwen3Config's own head_dim default is 128, not hidden / heads.
    json q = json::parse(kQwen3_06B);
    q.erase("head_dim");
    q["hidden_size"] = 512;
    EXPECT_EQ(parse(q).head_dim, 128);
}

TEST(ModelConfig, Qwen2AlwaysHasAttentionBias) {
    json j = llama();
    j["architectures"] = {"Qwen2ForCausalLM"};
    j.erase("attention_bias");
    ModelConfig c = parse(j);
    EXPECT_EQ(c.arch, Arch::Qwen2);
    EXPECT_TRUE(c.attention_bias);
    EXPECT_FALSE(c.qk_norm);
    j["attention_bias"] = false;  // HF's Qwen2 ignores the field
    EXPECT_TRUE(parse(j).attention_bias);
    j = llama();
    j["attention_bias"] = true;
    EXPECT_TRUE(parse(j).attention_bias);
}

TEST(ModelConfig, MistralIsLlama) {
    json j = llama();
    j["architectures"] = {"MistralForCausalLM"};
    j["sliding_window"] = nullptr;
    EXPECT_EQ(parse(j).arch, Arch::Llama);
    j["sliding_window"] = 8192;  // as long as the context: no effect
    EXPECT_EQ(parse(j).arch, Arch::Llama);
}

TEST(ModelConfig, TheDtypeFieldOfNewerTransformersIsRead) {
    json j = llama();
    j.erase("torch_dtype");
    j["dtype"] = "float16";
    EXPECT_EQ(parse(j).torch_dtype, "float16");
}

TEST(ModelConfig, LinearRopeScalingDividesFrequenciesAndOtherTypesAreRefused) {
    json j = llama();
    j["rope_scaling"] = {{"rope_type", "default"}};
    EXPECT_TRUE(parse(j).rope_factors().empty());
    j["rope_scaling"] = {{"type", "default"}};
    EXPECT_TRUE(parse(j).rope_factors().empty());
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
    expect_error(j, "'rope_scaling.rope_type': YaRN is supported for DeepSeek models only");
    for (const char* type : {"dynamic", "longrope", "su"}) {
        j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
        expect_error(j, std::string("rope type '") + type + "' is not supported");
    }
    j["rope_scaling"] = {{"factor", 4.0}};
    expect_error(j, "rope_scaling");
    j["rope_scaling"] = "linear";
    expect_error(j, "rope_scaling");

    // Linear: every frequency divided by factor.
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.5}};
    ModelConfig c = parse(j);
    EXPECT_EQ(c.rope_linear_factor, 2.5);
    EXPECT_TRUE(c.rope_freq_factors.empty());
    EXPECT_EQ(c.rope_factors(), std::vector<float>(32, 2.5f));
    j["rope_scaling"] = {{"type", "linear"}};
    expect_error(j, "field 'rope_scaling.factor': missing");
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 0.0}};
    expect_error(j, "field 'rope_scaling.factor'");
}

// Llama 3.2-1B's config.json as published (rope_scaling "llama3"), against the inverse frequencies transformers
// 5.24 computes for it (_compute_llama3_parameters).
TEST(ModelConfig, Llama3RopeScalingMatchesTransformers) {
    json j = llama();
    j["max_position_embeddings"] = 131072;
    j["rope_scaling"] = {{"factor", 32.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                         {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}};
    const ModelConfig c = parse(j);
    const std::vector<double> want = {
        1.0,         0.663601279,  0.440366626,  0.292227834,  0.193922758,  0.128687382,  0.0853971019,
        0.0566696189, 0.0376060307, 0.0249554086, 0.0165604409, 0.0109895291, 0.00729266508, 0.00483942125,
        0.00321144611, 0.00129054801, 0.000429556705, 9.70828623e-05, 1.94616387e-05, 1.29147675e-05,
        8.57025589e-06, 5.68723226e-06, 3.77405445e-06, 2.50446715e-06, 1.66196742e-06, 1.10288363e-06,
        7.31874934e-07, 4.85673127e-07, 3.22293289e-07, 2.13874230e-07, 1.41927202e-07, 9.41830649e-08};
    ASSERT_EQ(c.rope_freq_factors.size(), want.size());
    EXPECT_EQ(c.rope_linear_factor, 1.0);
    const std::vector<float> factors = c.rope_factors();
    std::vector<float> got(want.size());
    rope_inv_freq(RopeSpec{static_cast<float>(c.rope_theta), factors}, c.head_dim, got.data());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6 * want[i]) << "pair " << i;

    // transformers v5: a top-level original_max_position_embeddings wins over the one inside; without either,
    // max_position_embeddings stands in.
    json k = j;
    k["rope_scaling"]["original_max_position_embeddings"] = 4096;
    k["original_max_position_embeddings"] = 8192;
    EXPECT_EQ(parse(k).rope_freq_factors, c.rope_freq_factors);
    k = j;
    k["rope_scaling"].erase("original_max_position_embeddings");
    k["max_position_embeddings"] = 8192;
    EXPECT_EQ(parse(k).rope_freq_factors, c.rope_freq_factors);
    k["max_position_embeddings"] = 131072;
    EXPECT_NE(parse(k).rope_freq_factors, c.rope_freq_factors);

    for (const char* field : {"factor", "low_freq_factor", "high_freq_factor"}) {
        k = j;
        k["rope_scaling"].erase(field);
        expect_error(k, std::string("field 'rope_scaling.") + field + "': missing");
    }
    k = j;
    k["rope_scaling"]["high_freq_factor"] = 1.0;  // no band between the two wavelengths
    expect_error(k, "field 'rope_scaling.high_freq_factor': must be in (1, inf)");
    k = j;
    k["rope_scaling"]["original_max_position_embeddings"] = 0;
    expect_error(k, "field 'rope_scaling.original_max_position_embeddings'");
}

// transformers v5 writes rope_parameters instead of rope_theta / rope_scaling.
TEST(ModelConfig, RopeParametersOfTransformersV5AreReadAndChecked) {
    json j = llama();
    j.erase("rope_theta");
    j.erase("rope_scaling");
    j["rope_parameters"] = {{"rope_theta", 1000000}, {"rope_type", "default"}};
    j["layer_types"] = json::array();
    for (int i = 0; i < 16; ++i) j["layer_types"].push_back("full_attention");
    EXPECT_EQ(parse(j).rope_theta, 1e6);
    j["rope_theta"] = 5.0;  // the one inside rope_parameters wins
    EXPECT_EQ(parse(j).rope_theta, 1e6);
    j["rope_parameters"] = {{"rope_type", "default"}};
    EXPECT_EQ(parse(j).rope_theta, 5.0);
    j["rope_parameters"] = {{"rope_theta", 0}, {"rope_type", "default"}};
    expect_error(j, "field 'rope_parameters.rope_theta'");
    j["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "yarn"}, {"factor", 4.0}};
    expect_error(j, "'rope_parameters.rope_type': YaRN is supported for DeepSeek models only");
    j["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}, {"rope_type", "default"}}},
                            {"other_attention", {{"rope_theta", 1e4}}}};
    expect_error(j, "'rope_parameters': per-layer-type RoPE parameters must be objects under full_attention and "
                    "sliding_attention, got 'other_attention'");
    j["rope_parameters"] = {{"rope_theta", 1e6}, {"partial_rotary_factor", 0.5}};
    expect_error(j, "'rope_parameters.partial_rotary_factor'");
    j["rope_parameters"] = {{"rope_theta", 1e6}, {"partial_rotary_factor", 1.0}};
    EXPECT_EQ(parse(j).rope_theta, 1e6);
    // A legacy rope_scaling takes the place of rope_parameters, as in v5.
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
    EXPECT_EQ(parse(j).rope_linear_factor, 2.0);
    EXPECT_EQ(parse(j).rope_theta, 5.0);
    j.erase("rope_scaling");
    j["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    EXPECT_EQ(parse(j).rope_freq_factors.size(), 32u);
}

TEST(ModelConfig, LayerTypesAndFullRotaryAreChecked) {
    json j = llama();
    j["layer_types"] = {"full_attention", "sliding_attention"};  // 2 of 16 layers
    expect_error(j, "'layer_types': must be a list of num_hidden_layers layer types");
    j["layer_types"] = json::array();
    for (int i = 0; i < 16; ++i) j["layer_types"].push_back(i % 2 ? "sliding_attention" : "full_attention");
    expect_error(j, "'sliding_window': missing, and some layers attend through a sliding window");
    j["sliding_window"] = 1024;
    const ModelConfig c = parse(j);
    EXPECT_EQ(c.sliding_window, 1024);
    for (int l = 0; l < 16; ++l) EXPECT_EQ(c.attention_window(l), l % 2 ? 1024 : 0) << l;
    j["layer_types"][3] = "chunked_attention";
    expect_error(j, "'layer_types': layer type \"chunked_attention\" is not supported");
    json q = json::parse(kQwen3_06B);
    q["layer_types"] = json::array();
    for (int i = 0; i < 28; ++i) q["layer_types"].push_back(i < 27 ? "full_attention" : "sliding_attention");
    expect_error(q, "'layer_types': layer type \"sliding_attention\" is not supported (supported: full_attention)");
    j["layer_types"] = "full_attention";
    expect_error(j, "'layer_types'");
    j.erase("layer_types");
    j["partial_rotary_factor"] = 0.5;
    expect_error(j, "'partial_rotary_factor'");
}

TEST(ModelConfig, AnUnknownOrMalformedArchitectureIsRefused) {
    json j = llama();
    j["architectures"] = {"GPT2LMHeadModel"};
    expect_error(j, "unsupported architecture 'GPT2LMHeadModel' (supported: Qwen3ForCausalLM");
    j["architectures"] = json::array();
    expect_error(j, "architectures");
    j["architectures"] = "LlamaForCausalLM";
    expect_error(j, "architectures");
    j["architectures"] = {7};
    expect_error(j, "architectures");
    j.erase("architectures");
    expect_error(j, "'architectures': missing");
}

TEST(ModelConfig, MissingOrNullRequiredFieldsAreNamed) {
    for (const char* k : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "rms_norm_eps", "vocab_size", "max_position_embeddings"}) {
        json j = llama();
        j.erase(k);
        expect_error(j, "field '" + std::string(k) + "': missing");
        j[k] = nullptr;
        expect_error(j, "field '" + std::string(k) + "': missing");
    }
}

TEST(ModelConfig, InvalidValuesAreRefusedNamingTheirField) {
    struct Case {
        const char* field;
        json value;
    };
    const Case cases[] = {
        {"hidden_size", 0},
        {"hidden_size", -2048},
        {"hidden_size", 65536 * 2},
        {"hidden_size", "2048"},
        {"hidden_size", 2048.0},
        {"hidden_size", 2048.5},
        {"hidden_size", true},
        {"hidden_size", 18446744073709551615ull},
        {"hidden_size", 1e300},
        {"intermediate_size", 0},
        {"intermediate_size", 1 << 21},
        {"num_hidden_layers", 0},
        {"num_hidden_layers", 1025},
        {"num_hidden_layers", -1},
        {"num_attention_heads", 0},
        {"num_attention_heads", 2048},
        {"num_key_value_heads", 0},
        {"num_key_value_heads", 64},  // more than the 32 heads
        {"num_key_value_heads", 6},   // does not divide 32
        {"head_dim", 0},
        {"head_dim", 63},
        {"head_dim", 4096},
        {"rms_norm_eps", 0},
        {"rms_norm_eps", -1e-5},
        {"rms_norm_eps", 2.0},
        {"rms_norm_eps", "1e-5"},
        {"rope_theta", 0},
        {"rope_theta", -10000},
        {"rope_theta", "big"},
        {"vocab_size", 0},
        {"vocab_size", (1 << 24) + 1},
        {"max_position_embeddings", 0},
        {"max_position_embeddings", 1 << 30},
        {"tie_word_embeddings", "yes"},
        {"tie_word_embeddings", 1},
        {"attention_bias", "false"},
        {"bos_token_id", -1},
        {"bos_token_id", 128256},  // == vocab_size
        {"eos_token_id", 200000},
        {"eos_token_id", json::array({128001, "x"})},
        {"eos_token_id", json::array({128001, -5})},
        {"eos_token_id", "</s>"},
        {"torch_dtype", "float64"},
        {"torch_dtype", 16},
        {"hidden_act", "gelu"},
        {"mlp_bias", true},
    };
    for (const Case& c : cases) {
        json j = llama();
        j[c.field] = c.value;
        SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
        expect_error(j, "field '" + std::string(c.field) + "'");
    }
}

TEST(ModelConfig, HeadsMustDivideHiddenWithoutHeadDim) {
    json j = llama();
    j["num_attention_heads"] = 24;  // 2048 % 24 != 0
    j["num_key_value_heads"] = 8;
    expect_error(j, "'num_attention_heads': 24 does not divide hidden_size 2048");
    j["head_dim"] = 64;  // explicit head_dim makes it fine (as in Qwen3, where heads * head_dim != hidden)
    EXPECT_EQ(parse(j).q_dim(), 24 * 64);
}

// Mistral v0.1: one window on every layer; Qwen's own window scheme is refused.
TEST(ModelConfig, MistralSlidesEveryLayerAndQwenWindowsAreRefused) {
    json j = llama();
    j["architectures"] = {"MistralForCausalLM"};
    j["sliding_window"] = 4096;
    const ModelConfig c = parse(j);
    EXPECT_EQ(c.sliding_window, 4096);
    for (int l = 0; l < c.num_hidden_layers; ++l) EXPECT_EQ(c.attention_window(l), 4096);
    j["sliding_window"] = 0;
    expect_error(j, "'sliding_window'");
    json q = json::parse(kQwen3_06B);
    EXPECT_EQ(parse(q).sliding_window, 0);
    q["use_sliding_window"] = true;
    expect_error(q, "'use_sliding_window'");
}

// google/gemma-3-270m's config.json as published (layer_types abbreviated into a loop).
json gemma3_270m() {
    json j = json::parse(R"({
      "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "attn_logit_softcapping": null, "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": null,
      "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640, "initializer_range": 0.02,
      "intermediate_size": 2048, "max_position_embeddings": 32768, "model_type": "gemma3_text",
      "num_attention_heads": 4, "num_hidden_layers": 18, "num_key_value_heads": 1, "pad_token_id": 0,
      "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0, "rope_scaling": null,
      "rope_theta": 1000000.0, "sliding_window": 512, "torch_dtype": "bfloat16", "transformers_version": "4.55.0.dev0",
      "use_bidirectional_attention": false, "use_cache": true, "vocab_size": 262144, "_sliding_window_pattern": 6})");
    j["layer_types"] = json::array();
    for (int i = 0; i < 18; ++i) j["layer_types"].push_back(i % 6 == 5 ? "full_attention" : "sliding_attention");
    return j;
}

// Qwen3-30B-A3B's config.json (Hugging Face, Apache-2.0), as far as tracelm reads it.
json qwen3_moe() {
    return json::parse(R"({
      "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "intermediate_size": 6144,
      "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
      "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "vocab_size": 151936, "max_position_embeddings": 40960,
      "tie_word_embeddings": false, "torch_dtype": "bfloat16", "hidden_act": "silu", "attention_bias": false,
      "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "norm_topk_prob": true,
      "decoder_sparse_step": 1, "mlp_only_layers": [], "router_aux_loss_coef": 0.001, "output_router_logits": false,
      "model_type": "qwen3_moe", "use_sliding_window": false, "sliding_window": null})");
}

TEST(ModelConfig, ParsesQwen3MoeAndWhichLayersHaveExperts) {
    const ModelConfig c = parse(qwen3_moe());
    EXPECT_EQ(c.arch, Arch::Qwen3);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.num_experts, 128);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_EQ(c.moe_intermediate_size, 768);
    EXPECT_TRUE(c.norm_topk_prob);
    for (int l = 0; l < 48; ++l) EXPECT_TRUE(c.is_moe(l)) << l;
    // transformers' rule: a layer outside mlp_only_layers whose index + 1 is a multiple of decoder_sparse_step.
    json j = qwen3_moe();
    j["decoder_sparse_step"] = 2;
    j["mlp_only_layers"] = {3, 47};
    const ModelConfig s = parse(j);
    for (int l = 0; l < 48; ++l) EXPECT_EQ(s.is_moe(l), (l + 1) % 2 == 0 && l != 3 && l != 47) << l;
    EXPECT_EQ(parse(llama()).num_experts, 0);
    EXPECT_FALSE(parse(llama()).is_moe(0));
}

TEST(ModelConfig, MalformedExpertFieldsAreRefusedByName) {
    const std::pair<const char*, json> cases[] = {
        {"num_experts", 0},         {"num_experts", -1},          {"num_experts", 1 << 20},
        {"num_experts_per_tok", 0}, {"num_experts_per_tok", 129}, {"moe_intermediate_size", 0},
        {"decoder_sparse_step", 0}, {"mlp_only_layers", 3},       {"mlp_only_layers", json::array({48})},
        {"shared_expert_intermediate_size", 512},
    };
    for (const auto& [field, value] : cases) {
        SCOPED_TRACE(std::string(field) + " = " + value.dump());
        json j = qwen3_moe();
        j[field] = value;
        expect_error(j, field);
    }
    json missing = qwen3_moe();
    missing.erase("num_experts_per_tok");
    expect_error(missing, "num_experts_per_tok");
}

// DeepSeek-V3.2's config.json (deepseek-ai/DeepSeek-V3.2 on Hugging Face, as published; the fields tracelm reads).
json deepseek_v32() {
    return json::parse(R"({
      "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "attention_bias": false,
      "bos_token_id": 0, "eos_token_id": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
      "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048, "intermediate_size": 18432,
      "kv_lora_rank": 512, "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
      "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
      "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
      "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "rms_norm_eps": 1e-06, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
      "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"}, "rope_theta": 10000,
      "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": false, "topk_group": 4,
      "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 129280})");
}

TEST(ModelConfig, ParsesDeepseekV32) {
    const ModelConfig c = parse(deepseek_v32());
    ASSERT_TRUE(c.mla);
    EXPECT_EQ(c.arch, Arch::Deepseek);
    EXPECT_EQ(c.head_dim, 64);  // the rope part, what RoPE rotates
    EXPECT_EQ(c.mla->latent_width(), 576);
    EXPECT_EQ(c.mla->index_n_heads, 64);
    EXPECT_EQ(c.mla->index_topk, 2048);
    EXPECT_EQ(c.num_experts, 256);
    EXPECT_EQ(c.mla->n_group, 8);
    EXPECT_EQ(c.mla->topk_group, 4);
    EXPECT_FLOAT_EQ(c.mla->routed_scaling_factor, 2.5f);
    for (int l = 0; l < 61; ++l) EXPECT_EQ(c.is_moe(l), l >= 3) << l;
    // 192^-0.5 * (0.1 ln 40 + 1)^2, docs/deepseek-v32-plan.md.
    EXPECT_NEAR(c.attention_scale(), 0.13523378, 1e-7);
    // YaRN: the fastest pairs keep their frequency, the slowest are divided by the factor.
    const std::vector<float> f = c.rope_factors();
    ASSERT_EQ(f.size(), 32u);
    EXPECT_EQ(f.front(), 1.0f);
    EXPECT_EQ(f.back(), 40.0f);

    json v3 = deepseek_v32();
    v3["architectures"] = {"DeepseekV3ForCausalLM"};
    EXPECT_EQ(parse(v3).mla->index_n_heads, 0);  // no indexer: dense attention
}

TEST(ModelConfig, DeepseekFeaturesTracelmLacksAreRefusedByName) {
    const std::pair<const char*, json> cases[] = {
        {"scoring_func", "softmax"}, {"topk_method", "greedy"}, {"n_group", 5},        {"topk_group", 9},
        {"attention_bias", true},    {"qk_rope_head_dim", 63},  {"q_lora_rank", 0},    {"index_topk", 0},
        {"n_routed_experts", 0},     {"first_k_dense_replace", 62},
    };
    for (const auto& [field, value] : cases) {
        SCOPED_TRACE(std::string(field) + " = " + value.dump());
        json j = deepseek_v32();
        j[field] = value;
        expect_error(j, field);
    }
    json j = deepseek_v32();
    j["rope_scaling"]["mscale"] = 0.707;  // an attention factor on cos/sin
    expect_error(j, "mscale");
    j = deepseek_v32();
    j["rope_scaling"].erase("original_max_position_embeddings");
    expect_error(j, "original_max_position_embeddings");
}

TEST(ModelConfig, ParsesGemma3_270M) {
    const ModelConfig c = parse(gemma3_270m());
    EXPECT_EQ(c.arch, Arch::Gemma3);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.sliding_window, 512);
    for (int l = 0; l < 18; ++l) EXPECT_EQ(c.is_sliding(l), l % 6 != 5) << l;
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.rope_local_theta, 1e4);
    EXPECT_TRUE(c.rope_factors().empty());
    EXPECT_EQ(c.attention_scale(), 1.0f / 16.0f);
    EXPECT_EQ(c.hidden_act, Activation::GeluTanh);
    EXPECT_EQ(c.embed_scale, std::sqrt(640.0f));
    EXPECT_EQ(c.norm_weight_offset, 1.0f);
    EXPECT_TRUE(c.qk_norm && c.sandwich_norms && c.tie_word_embeddings);
    EXPECT_EQ(c.weight_prefix, "model.");
}

// Older files: sliding_window_pattern instead of layer_types; rope_scaling applies to the global layers only (Gemma 3
// 4B and up scale them linearly by 8).
TEST(ModelConfig, Gemma3PatternAndGlobalOnlyScaling) {
    json j = gemma3_270m();
    j.erase("layer_types");
    j["sliding_window_pattern"] = 3;
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
    j["query_pre_attn_scalar"] = 168;
    const ModelConfig c = parse(j);
    for (int l = 0; l < 18; ++l) EXPECT_EQ(c.is_sliding(l), l % 3 != 2) << l;
    EXPECT_EQ(c.rope_linear_factor, 8.0);
    EXPECT_EQ(c.attention_scale(), 1.0f / std::sqrt(168.0f));
    j.erase("sliding_window_pattern");  // the default pattern: every sixth layer global
    const ModelConfig d = parse(j);
    for (int l = 0; l < 18; ++l) EXPECT_EQ(d.is_sliding(l), l % 6 != 5) << l;
}

// transformers v5 writes RoPE per layer type, and a multimodal checkpoint keeps the text model in text_config.
TEST(ModelConfig, Gemma3PerLayerTypeRopeAndMultimodalTextConfig) {
    json t = gemma3_270m();
    t.erase("rope_theta");
    t.erase("rope_local_base_freq");
    t.erase("rope_scaling");
    t["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"rope_theta", 1e6}, {"factor", 8.0}}},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5e4}}}};
    const ModelConfig c = parse(t);
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.rope_linear_factor, 8.0);
    EXPECT_EQ(c.rope_local_theta, 5e4);
    t["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
    expect_error(t, "'rope_parameters.sliding_attention.rope_type': scaled RoPE on sliding-window layers");
    t["rope_parameters"]["sliding_attention"]["rope_type"] = "default";

    t.erase("architectures");
    const json mm = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"text_config", t},
                     {"tie_word_embeddings", true}};
    const ModelConfig m = parse(mm);
    EXPECT_EQ(m.arch, Arch::Gemma3);
    EXPECT_EQ(m.hidden_size, 640);
    EXPECT_EQ(m.weight_prefix, "model.language_model.");
    EXPECT_EQ(m.rope_local_theta, 5e4);
    expect_error({{"architectures", {"Gemma3ForConditionalGeneration"}}}, "'text_config': must be an object");
    json bad = mm;
    bad["text_config"]["hidden_size"] = "640";
    expect_error(bad, "field 'text_config.hidden_size'");
}

TEST(ModelConfig, Gemma3FeaturesTracelmLacksAreRefused) {
    for (const char* field : {"final_logit_softcapping", "attn_logit_softcapping"}) {
        json j = gemma3_270m();
        j[field] = 30.0;
        expect_error(j, std::string("'") + field + "': logit soft-capping is not supported");
    }
    json j = gemma3_270m();
    j["use_bidirectional_attention"] = true;
    expect_error(j, "'use_bidirectional_attention'");
    j = gemma3_270m();
    j["hidden_activation"] = "gelu";
    expect_error(j, "'hidden_activation': activation 'gelu' is not supported (supported: silu, gelu_pytorch_tanh)");
    j = llama();
    j["hidden_act"] = "gelu_pytorch_tanh";  // only Gemma's MLP has it
    expect_error(j, "'hidden_act': activation 'gelu_pytorch_tanh' is not supported (supported: silu)");
}

TEST(ModelConfig, TextThatIsNotAConfigIsRefusedNamingTheFile) {
    for (const char* text : {"", "{", "[1, 2]", "\"hi\"", "null", "{\"a\": }"}) {
        SCOPED_TRACE(text);
        try {
            ModelConfig::from_json_text(text, "x/config.json");
            ADD_FAILURE() << "accepted";
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find("x/config.json"), std::string::npos) << e.what();
        }
    }
}

TEST(ModelConfig, FromFileNamesTheFile) {
    char tmpl[] = "/tmp/tracelm_config_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::filesystem::path dir(tmpl);
    const std::string path = (dir / "config.json").string();
    {
        std::ofstream(path) << kQwen3_06B;
    }
    EXPECT_EQ(ModelConfig::from_file(path).num_hidden_layers, 28);
    {
        json j = json::parse(kQwen3_06B);
        j["num_hidden_layers"] = 0;
        std::ofstream(path) << j.dump();
    }
    try {
        ModelConfig::from_file(path);
        ADD_FAILURE() << "accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(path + ": field 'num_hidden_layers'"), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(dir);
    try {
        ModelConfig::from_file(path);
        ADD_FAILURE() << "opened a missing file";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace tracelm
