#include "model/config.h"

#include "formats/gguf.h"
#include "runtime/rope.h"
#include "runtime/untrusted.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace tracelm {

using nlohmann::json;

std::string_view arch_name(Arch a) {
    switch (a) {
        case Arch::Qwen3: return "qwen3";
        case Arch::Qwen2: return "qwen2";
        case Arch::Llama: return "llama";
        case Arch::Gemma3: return "gemma3";
        case Arch::Deepseek: return "deepseek";
    }
    return "?";
}

namespace {

// Typed, range-checked access to the fields of one config object; every error names the source
// file and the field.
class Fields {
   public:
    // prefix names the enclosing object in messages, e.g. "rope_parameters.".
    Fields(const json& j, const std::string& source, std::string prefix = "")
        : j_(j), source_(source), prefix_(std::move(prefix)) {}

    [[noreturn]] void fail(std::string_view field, const std::string& msg) const {
        throw std::runtime_error(source_ + ": field '" + prefix_ + std::string(field) + "': " + msg);
    }

    // Present and not null: HF writes null for "use the default".
    bool has(const char* field) const { return j_.contains(field) && !j_.at(field).is_null(); }
    const json& at(const char* field) const { return j_.at(field); }

    int64_t integer(const char* field, int64_t lo, int64_t hi, std::optional<int64_t> dflt = std::nullopt) const {
        if (!has(field)) {
            if (dflt) return *dflt;
            fail(field, "missing");
        }
        return integer_value(field, at(field), lo, hi);
    }

    int64_t integer_value(const char* field, const json& v, int64_t lo, int64_t hi) const {
        if (!v.is_number_integer()) fail(field, "must be an integer, got " + untrusted::escape(v.dump()));
        // Unsigned values above INT64_MAX would wrap in get<int64_t>().
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
            fail(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + untrusted::escape(v.dump()));
        const auto x = v.get<int64_t>();
        if (x < lo || x > hi)
            fail(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + untrusted::escape(v.dump()));
        return x;
    }

    // A finite number in the open interval (lo, hi).
    double number(const char* field, double lo, double hi, std::optional<double> dflt = std::nullopt) const {
        if (!has(field)) {
            if (dflt) return *dflt;
            fail(field, "missing");
        }
        const json& v = at(field);
        if (!v.is_number()) fail(field, "must be a number, got " + untrusted::escape(v.dump()));
        const auto x = v.get<double>();
        if (!std::isfinite(x) || !(x > lo) || !(x < hi)) {
            std::ostringstream os;
            os << "must be in (" << lo << ", " << hi << "), got " << untrusted::escape(v.dump());
            fail(field, os.str());
        }
        return x;
    }

    bool boolean(const char* field, bool dflt) const {
        if (!has(field)) return dflt;
        if (!at(field).is_boolean()) fail(field, "must be true or false, got " + untrusted::escape(at(field).dump()));
        return at(field).get<bool>();
    }

    std::optional<std::string> string(const char* field) const {
        if (!has(field)) return std::nullopt;
        if (!at(field).is_string()) fail(field, "must be a string, got " + untrusted::escape(at(field).dump()));
        return at(field).get<std::string>();
    }

   private:
    const json& j_;
    const std::string& source_;
    std::string prefix_;
};

constexpr int64_t kMaxHidden = 65536;
constexpr int64_t kMaxIntermediate = 1 << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxPositions = 1 << 24;

Arch parse_arch(const Fields& f) {
    if (!f.has("architectures")) f.fail("architectures", "missing");
    const json& a = f.at("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string())
        f.fail("architectures", "must be a non-empty list of strings, got " + untrusted::escape(a.dump()));
    const auto name = a[0].get<std::string>();
    if (name == "Qwen3ForCausalLM" || name == "Qwen3MoeForCausalLM") return Arch::Qwen3;
    if (name == "Qwen2ForCausalLM") return Arch::Qwen2;
    // Mistral is Llama plus an optional sliding window on every layer.
    if (name == "LlamaForCausalLM" || name == "MistralForCausalLM") return Arch::Llama;
    // The multimodal checkpoint's text model (its config in text_config, its weights under model.language_model).
    if (name == "Gemma3ForCausalLM" || name == "Gemma3ForConditionalGeneration") return Arch::Gemma3;
    // V3.2 is V3 plus the lightning indexer.
    if (name == "DeepseekV3ForCausalLM" || name == "DeepseekV32ForCausalLM") return Arch::Deepseek;
    f.fail("architectures", "unsupported architecture '" + untrusted::escape(name) +
                                "' (supported: Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, "
                                "MistralForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, "
                                "DeepseekV3ForCausalLM, DeepseekV32ForCausalLM)");
}

constexpr double kInf = std::numeric_limits<double>::infinity();
// Open intervals for RoPE's base and scaling factor: real models use bases of 1e4..1e7 and factors of
// 1..64; values far outside (1e-30, 1e300) only make every rotation degenerate.
constexpr double kMinRopeTheta = 1.0, kMaxRopeTheta = 1e12;
constexpr double kMinRopeFactor = 1e-3, kMaxRopeFactor = 1e4;

// Llama 3.1's "llama3" scaling as divisors of the inverse frequencies, one per pair, as llama.cpp's converter
// stores them in rope_freqs.weight: a pair whose wavelength is shorter than original_max_position_embeddings /
// high_freq_factor keeps its frequency, one longer than original_max_position_embeddings / low_freq_factor has it
// divided by factor, and those between move smoothly from one to the other (the frequencies of transformers'
// _compute_llama3_parameters).
std::vector<float> llama3_factors(const Fields& f, const Fields& r, const ModelConfig& c) {
    const double factor = r.number("factor", kMinRopeFactor, kMaxRopeFactor);
    const double low = r.number("low_freq_factor", 0.0, kInf);
    const double high = r.number("high_freq_factor", low, kInf);  // above low: the band between has a width
    // As in transformers v5: a top-level value wins, and max_position_embeddings stands in for a missing one.
    const char* omp = "original_max_position_embeddings";
    const double old_context = static_cast<double>(f.has(omp)   ? f.integer(omp, 1, kMaxPositions)
                                                   : r.has(omp) ? r.integer(omp, 1, kMaxPositions)
                                                                : c.max_position_embeddings);
    std::vector<float> inv(static_cast<size_t>(c.head_dim / 2));
    rope_inv_freq(RopeSpec{static_cast<float>(c.rope_theta), {}}, c.head_dim, inv.data());
    std::vector<float> factors;
    for (const float x : inv) {
        const double wavelength = 2.0 * std::numbers::pi / x;
        if (wavelength < old_context / high) {
            factors.push_back(1.0f);
        } else if (wavelength > old_context / low) {
            factors.push_back(static_cast<float>(factor));
        } else {
            const double smooth = (old_context / wavelength - low) / (high - low);
            factors.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth)));
        }
    }
    return factors;
}

// YaRN's magnitude correction mscale: log_mul * ln(factor) + 1, where log_mul is 0.1 * mscale (transformers) or
// GGUF's rope.scaling.yarn_log_multiplier (llama.cpp's converter writes 0.1 * mscale_all_dim).
double yarn_mscale(double factor, double log_mul) { return factor <= 1.0 ? 1.0 : log_mul * std::log(factor) + 1.0; }

struct Yarn {
    double factor, original_context, beta_fast, beta_slow;
    double log_mul;  // of the softmax scale's mscale^2; 0: none
};

// YaRN (DeepSeek-V3's rope_scaling) as per-pair divisors of the inverse frequencies, as transformers'
// _compute_yarn_parameters scales them: pair i keeps its frequency below the correction range of beta_fast, is
// divided by factor above that of beta_slow, and blends linearly between. The attention's softmax scale takes
// mscale(factor, mscale_all_dim)^2 (ModelConfig::Mla). Needs head_dim, rope_theta and mla.
std::vector<float> yarn_divisors(const Yarn& y, ModelConfig& c) {
    if (y.log_mul != 0.0) c.mla->scale_mscale2 = yarn_mscale(y.factor, y.log_mul) * yarn_mscale(y.factor, y.log_mul);
    const double d = c.head_dim, base = c.rope_theta;
    const auto correction_dim = [&](double rotations) {
        return d * std::log(y.original_context / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
    };
    const double low = std::max(std::floor(correction_dim(y.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction_dim(y.beta_slow)), d - 1.0);
    if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
    std::vector<float> factors(static_cast<size_t>(c.head_dim / 2));
    for (size_t i = 0; i < factors.size(); ++i) {
        const double keep = 1.0 - std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        factors[i] = static_cast<float>(1.0 / (keep + (1.0 - keep) / y.factor));
    }
    return factors;
}

// A config.json's YaRN. cos/sin would take mscale / mscale_all_dim's ratio, refused unless 1 (DeepSeek-V3 and V3.2
// have mscale == mscale_all_dim).
std::vector<float> yarn_factors(const Fields& r, ModelConfig& c) {
    if (!c.mla) r.fail("rope_type", "YaRN is supported for DeepSeek models only");
    const double factor = r.number("factor", kMinRopeFactor, kMaxRopeFactor);
    const double orig = static_cast<double>(r.integer("original_max_position_embeddings", 1, kMaxPositions));
    const double beta_fast = r.number("beta_fast", 0.0, kInf, 32.0), beta_slow = r.number("beta_slow", 0.0, kInf, 1.0);
    const double mscale = r.number("mscale", -kInf, kInf, 1.0), mscale_all = r.number("mscale_all_dim", -kInf, kInf, 0.0);
    if ((mscale_all != 0.0 && yarn_mscale(factor, 0.1 * mscale) != yarn_mscale(factor, 0.1 * mscale_all)) ||
        r.has("attention_factor"))
        r.fail("mscale", "a YaRN attention factor other than 1 on cos/sin is not supported");
    return yarn_divisors({factor, orig, beta_fast, beta_slow, 0.1 * mscale_all}, c);
}

void parse_rope_parameters(const Fields& f, const json& rope, const Fields& r, bool type_required, ModelConfig& c);

// Older files have rope_theta and rope_scaling; transformers v5 writes rope_parameters
// {rope_type, rope_theta, ...}. As in v5, a non-null rope_scaling takes the place of
// rope_parameters, and a rope_theta inside it wins over the top-level one. Needs head_dim and
// max_position_embeddings.
void parse_rope(const Fields& f, const std::string& source, ModelConfig& c) {
    c.rope_theta = f.number("rope_theta", kMinRopeTheta, kMaxRopeTheta, 10000.0);
    const char* field = f.has("rope_scaling") ? "rope_scaling" : f.has("rope_parameters") ? "rope_parameters" : nullptr;
    if (field == nullptr) return;
    const json& rope = f.at(field);
    if (!rope.is_object()) f.fail(field, "must be null or an object, got " + untrusted::escape(rope.dump()));
    // Per layer type (transformers v5's Gemma 3): the full-attention layers' parameters are the model's; the
    // sliding-window layers' give rope_local_theta and may not scale.
    if (rope.contains("full_attention") || rope.contains("sliding_attention")) {
        for (const auto& [key, value] : rope.items())
            if ((key != "full_attention" && key != "sliding_attention") || !value.is_object())
                f.fail(field, "per-layer-type RoPE parameters must be objects under full_attention and "
                              "sliding_attention, got '" + untrusted::escape(key) + "'");
        if (rope.contains("sliding_attention")) {
            const Fields local(rope.at("sliding_attention"), source, std::string(field) + ".sliding_attention.");
            if (local.string("rope_type").value_or("default") != "default")
                local.fail("rope_type", "scaled RoPE on sliding-window layers is not supported");
            c.rope_local_theta = local.number("rope_theta", kMinRopeTheta, kMaxRopeTheta, c.rope_local_theta);
        }
        if (!rope.contains("full_attention")) return;
        parse_rope_parameters(f, rope.at("full_attention"), Fields(rope.at("full_attention"), source,
                                                                    std::string(field) + ".full_attention."),
                              false, c);
        return;
    }
    parse_rope_parameters(f, rope, Fields(rope, source, std::string(field) + "."),
                          field == std::string_view("rope_scaling"), c);
}

void parse_rope_parameters(const Fields& f, const json& rope, const Fields& r, bool type_required, ModelConfig& c) {
    // Newer files say "rope_type", older ones "type"; v4 required one of them in rope_scaling.
    std::optional<std::string> type = r.string(rope.contains("rope_type") ? "rope_type" : "type");
    if (!type && type_required) r.fail("rope_type", "missing, got " + untrusted::escape(rope.dump()));
    const std::string kind = type.value_or("default");
    if (kind != "default" && kind != "linear" && kind != "llama3" && kind != "yarn")
        r.fail("rope_type", "rope type '" + untrusted::escape(kind) +
                                "' is not supported (supported: default, linear, llama3, yarn)");
    for (const auto& [key, value] : rope.items())
        if (value.is_object()) r.fail(key, "nested RoPE parameters are not supported");
    c.rope_theta = r.number("rope_theta", kMinRopeTheta, kMaxRopeTheta, c.rope_theta);
    if (r.has("partial_rotary_factor") && r.number("partial_rotary_factor", 0.0, 2.0) != 1.0)
        r.fail("partial_rotary_factor", "partial rotary embeddings are not supported");
    if (kind == "linear") c.rope_linear_factor = r.number("factor", kMinRopeFactor, kMaxRopeFactor);
    if (kind == "llama3") c.rope_freq_factors = llama3_factors(f, r, c);
    if (kind == "yarn") c.rope_freq_factors = yarn_factors(r, c);
}

// Which layers attend through a sliding window, and how wide it is: layer_types where given; else Gemma 3's
// sliding_window_pattern (every pattern-th layer global, default 6); else, for Mistral, every layer when there is
// a sliding_window. Qwen's windows (use_sliding_window with max_window_layers) are refused. A window as long as
// the context changes nothing and is dropped.
void parse_layer_kinds(const Fields& f, ModelConfig& c) {
    const bool qwen = c.arch == Arch::Qwen2 || c.arch == Arch::Qwen3;
    if (qwen && f.boolean("use_sliding_window", false))
        f.fail("use_sliding_window", "sliding-window attention is not supported for Qwen");
    // Qwen files name a window they do not use (use_sliding_window false).
    int64_t window = !qwen && f.has("sliding_window") ? f.integer("sliding_window", 1, kMaxPositions) : 0;
    std::vector<uint8_t> sliding(static_cast<size_t>(c.num_hidden_layers), 0);
    if (f.has("layer_types")) {
        const json& lt = f.at("layer_types");
        if (!lt.is_array() || lt.size() != sliding.size())
            f.fail("layer_types", "must be a list of num_hidden_layers layer types, got " + untrusted::escape(lt.dump(), 200));
        for (size_t i = 0; i < lt.size(); ++i) {
            if (lt[i] == "sliding_attention" && !qwen) {
                sliding[i] = 1;
            } else if (lt[i] != "full_attention") {
                f.fail("layer_types", "layer type " + untrusted::escape(lt[i].dump()) + " is not supported (supported: " +
                                          (qwen ? "full_attention)" : "full_attention, sliding_attention)"));
            }
        }
    } else if (c.arch == Arch::Gemma3) {
        const int64_t pattern = f.integer("sliding_window_pattern", 1, kMaxLayers, 6);
        for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = (i + 1) % static_cast<size_t>(pattern) != 0;
    } else {
        std::fill(sliding.begin(), sliding.end(), window > 0);
    }
    const bool any = std::find(sliding.begin(), sliding.end(), 1) != sliding.end();
    if (any && window == 0) f.fail("sliding_window", "missing, and some layers attend through a sliding window");
    if (window >= c.max_position_embeddings) window = 0;
    if (!any || window == 0) return;
    c.sliding_window = static_cast<int>(window);
    c.layer_sliding = std::move(sliding);
}

// The activation of the MLP's gate: hidden_activation (Gemma) or hidden_act.
Activation parse_activation(const Fields& f, const ModelConfig& c) {
    const bool gemma = c.arch == Arch::Gemma3;
    const char* field = f.has("hidden_activation") ? "hidden_activation" : "hidden_act";
    const std::string act = f.string(field).value_or(gemma ? "gelu_pytorch_tanh" : "silu");
    if (act == "silu") return Activation::Silu;
    if (gemma && act == "gelu_pytorch_tanh") return Activation::GeluTanh;
    f.fail(field, "activation '" + untrusted::escape(act) + "' is not supported (supported: silu" +
                      (gemma ? ", gelu_pytorch_tanh)" : ")"));
}

// Gemma 3's own fields; before parse_rope, whose per-layer-type parameters may set rope_local_theta again.
void parse_gemma3(const Fields& f, ModelConfig& c) {
    c.qk_norm = true;
    c.sandwich_norms = true;
    c.norm_weight_offset = 1.0f;
    c.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
    c.query_pre_attn_scalar = f.number("query_pre_attn_scalar", 0.0, 1e9, 256.0);
    c.rope_local_theta = f.number("rope_local_base_freq", kMinRopeTheta, kMaxRopeTheta, 10000.0);
    for (const char* field : {"final_logit_softcapping", "attn_logit_softcapping"})
        if (f.has(field)) f.fail(field, "logit soft-capping is not supported");
    if (f.boolean("use_bidirectional_attention", false))
        f.fail("use_bidirectional_attention", "bidirectional attention is not supported");
}

constexpr int64_t kMaxExperts = 4096;

// Qwen3-MoE's experts and which layers have them: as transformers builds Qwen3MoeDecoderLayer, a layer outside
// mlp_only_layers whose (index + 1) is a multiple of decoder_sparse_step.
void parse_moe(const Fields& f, ModelConfig& c) {
    c.num_experts = static_cast<int>(f.integer("num_experts", 1, kMaxExperts));
    c.num_experts_per_tok = static_cast<int>(f.integer("num_experts_per_tok", 1, c.num_experts));
    c.moe_intermediate_size = static_cast<int>(f.integer("moe_intermediate_size", 1, kMaxIntermediate));
    c.norm_topk_prob = f.boolean("norm_topk_prob", false);
    const int64_t step = f.integer("decoder_sparse_step", 1, kMaxLayers, 1);
    if (f.has("shared_expert_intermediate_size") && f.integer("shared_expert_intermediate_size", 0, kMaxIntermediate) != 0)
        f.fail("shared_expert_intermediate_size", "shared experts are not supported");
    c.layer_moe.assign(static_cast<size_t>(c.num_hidden_layers), 0);
    for (size_t l = 0; l < c.layer_moe.size(); ++l) c.layer_moe[l] = (l + 1) % static_cast<size_t>(step) == 0;
    if (f.has("mlp_only_layers")) {
        const json& only = f.at("mlp_only_layers");
        if (!only.is_array()) f.fail("mlp_only_layers", "must be a list of layer indices");
        for (const json& v : only)
            c.layer_moe[static_cast<size_t>(f.integer_value("mlp_only_layers", v, 0, c.num_hidden_layers - 1))] = 0;
    }
}

// DeepSeek-V3 / V3.2's attention geometry (before parse_rope: head_dim is the rope part's) and, after the layer
// count, its MoE: routed experts on layers from first_k_dense_replace on (every moe_layer_freq-th), the first ones
// dense. Other scoring functions or selection methods than V3's are refused.
void parse_deepseek(const Fields& f, ModelConfig& c) {
    ModelConfig::Mla m;
    m.q_lora_rank = static_cast<int>(f.integer("q_lora_rank", 1, kMaxHidden));
    m.kv_lora_rank = static_cast<int>(f.integer("kv_lora_rank", 1, kMaxHidden));
    m.qk_nope_head_dim = static_cast<int>(f.integer("qk_nope_head_dim", 1, kMaxHeadDim));
    m.qk_rope_head_dim = static_cast<int>(f.integer("qk_rope_head_dim", 2, kMaxHeadDim));
    m.v_head_dim = static_cast<int>(f.integer("v_head_dim", 1, kMaxHeadDim));
    if (m.qk_rope_head_dim % 2 != 0) f.fail("qk_rope_head_dim", "must be even (RoPE rotates pairs)");
    if (c.architecture == "DeepseekV32ForCausalLM") {
        m.index_n_heads = static_cast<int>(f.integer("index_n_heads", 1, kMaxHeads));
        m.index_head_dim = static_cast<int>(f.integer("index_head_dim", m.qk_rope_head_dim, kMaxHeadDim));
        m.index_topk = static_cast<int>(f.integer("index_topk", 1, kMaxPositions));
    }
    if (f.boolean("attention_bias", false)) f.fail("attention_bias", "attention biases are not supported for DeepSeek");
    c.head_dim = m.qk_rope_head_dim;
    c.num_key_value_heads = c.num_attention_heads;
    c.mla = m;
}

// DeepSeek's expert groups, whichever format gave them: fail(topk_group?, why) when n_group does not split the
// experts into groups of at least 2, or when topk_group groups hold fewer than num_experts_per_tok experts.
void check_deepseek_groups(const ModelConfig& c, const std::function<void(bool, const std::string&)>& fail) {
    const ModelConfig::Mla& m = *c.mla;
    if (c.num_experts % m.n_group != 0 || c.num_experts / m.n_group < 2)
        fail(false, std::to_string(m.n_group) + " groups of at least 2 of " + std::to_string(c.num_experts) +
                        " experts are not possible");
    if (static_cast<int64_t>(m.topk_group) * (c.num_experts / m.n_group) < c.num_experts_per_tok)
        fail(true, "its groups hold fewer experts than num_experts_per_tok");
}

// Routed experts on layers from `dense` on, every freq-th; the first ones keep the dense MLP.
void set_deepseek_moe_layers(ModelConfig& c, int64_t dense, int64_t freq) {
    c.layer_moe.assign(static_cast<size_t>(c.num_hidden_layers), 0);
    for (size_t l = 0; l < c.layer_moe.size(); ++l)
        c.layer_moe[l] = static_cast<int64_t>(l) >= dense && l % static_cast<size_t>(freq) == 0;
}

void parse_deepseek_moe(const Fields& f, ModelConfig& c) {
    ModelConfig::Mla& m = *c.mla;
    c.num_experts = static_cast<int>(f.integer("n_routed_experts", 1, kMaxExperts));
    c.num_experts_per_tok = static_cast<int>(f.integer("num_experts_per_tok", 1, c.num_experts));
    c.moe_intermediate_size = static_cast<int>(f.integer("moe_intermediate_size", 1, kMaxIntermediate));
    c.norm_topk_prob = f.boolean("norm_topk_prob", false);
    m.n_group = static_cast<int>(f.integer("n_group", 1, c.num_experts, 1));
    m.topk_group = static_cast<int>(f.integer("topk_group", 1, m.n_group, m.n_group));
    check_deepseek_groups(c, [&](bool topk, const std::string& msg) { f.fail(topk ? "topk_group" : "n_group", msg); });
    m.routed_scaling_factor = static_cast<float>(f.number("routed_scaling_factor", 0.0, 1e6, 1.0));
    m.n_shared_experts = static_cast<int>(f.integer("n_shared_experts", 0, 64, 0));
    if (f.string("scoring_func").value_or("sigmoid") != "sigmoid")
        f.fail("scoring_func", "only sigmoid router scores are supported");
    if (f.string("topk_method").value_or("noaux_tc") != "noaux_tc")
        f.fail("topk_method", "only noaux_tc expert selection is supported");
    set_deepseek_moe_layers(c, f.integer("first_k_dense_replace", 0, c.num_hidden_layers, 0),
                            f.integer("moe_layer_freq", 1, kMaxLayers, 1));
}

void check_unsupported_features(const Fields& f) {
    if (f.has("partial_rotary_factor") && f.number("partial_rotary_factor", 0.0, 2.0) != 1.0)
        f.fail("partial_rotary_factor", "partial rotary embeddings are not supported");
    if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "MLP biases are not supported");
}

ModelConfig parse(const json& top, const std::string& source) {
    if (!top.is_object()) throw std::runtime_error(source + ": expected a JSON object at top level");
    ModelConfig c;
    c.arch = parse_arch(Fields(top, source));
    c.architecture = top.at("architectures")[0].get<std::string>();
    // A multimodal Gemma 3 keeps its text model's configuration in text_config.
    const bool multimodal = c.architecture == "Gemma3ForConditionalGeneration";
    if (multimodal && !(top.contains("text_config") && top.at("text_config").is_object()))
        Fields(top, source).fail("text_config", "must be an object");
    const json& j = multimodal ? top.at("text_config") : top;
    const Fields f(j, source, multimodal ? "text_config." : "");
    if (multimodal) c.weight_prefix = "model.language_model.";

    c.hidden_size = static_cast<int>(f.integer("hidden_size", 1, kMaxHidden));
    c.intermediate_size = static_cast<int>(f.integer("intermediate_size", 1, kMaxIntermediate));
    c.num_hidden_layers = static_cast<int>(f.integer("num_hidden_layers", 1, kMaxLayers));
    c.num_attention_heads = static_cast<int>(f.integer("num_attention_heads", 1, kMaxHeads));
    c.num_key_value_heads =
        static_cast<int>(f.integer("num_key_value_heads", 1, c.num_attention_heads, c.num_attention_heads));
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        f.fail("num_key_value_heads", std::to_string(c.num_key_value_heads) + " does not divide num_attention_heads " +
                                          std::to_string(c.num_attention_heads));
    if (c.arch == Arch::Deepseek) {
        parse_deepseek(f, c);
    } else if (f.has("head_dim")) {
        c.head_dim = static_cast<int>(f.integer("head_dim", 1, kMaxHeadDim));
    } else if (c.arch == Arch::Qwen3 || c.arch == Arch::Gemma3) {
        c.head_dim = c.arch == Arch::Qwen3 ? 128 : 256;  // their config classes' defaults, which are not hidden/heads
    } else {
        if (c.hidden_size % c.num_attention_heads != 0)
            f.fail("num_attention_heads", std::to_string(c.num_attention_heads) +
                                              " does not divide hidden_size " + std::to_string(c.hidden_size) +
                                              " (and head_dim is not given)");
        c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    if (c.head_dim % 2 != 0 || c.head_dim > kMaxHeadDim)  // RoPE rotates pairs
        f.fail("head_dim", "must be even and at most " + std::to_string(kMaxHeadDim) + ", got " +
                               std::to_string(c.head_dim));

    c.rms_norm_eps = static_cast<float>(f.number("rms_norm_eps", 0.0, 1.0));
    c.vocab_size = static_cast<int>(f.integer("vocab_size", 1, kMaxVocab));
    c.max_position_embeddings = static_cast<int>(f.integer("max_position_embeddings", 1, kMaxPositions));
    if (c.arch == Arch::Gemma3) parse_gemma3(f, c);
    parse_rope(f, source, c);
    // Gemma ties its head unless told otherwise (a multimodal checkpoint says so at the top level).
    c.tie_word_embeddings = Fields(multimodal ? top : j, source).boolean("tie_word_embeddings", c.arch == Arch::Gemma3);
    // HF's Qwen2 gives q/k/v a bias whatever the config says.
    c.attention_bias = f.boolean("attention_bias", false) || c.arch == Arch::Qwen2;
    c.qk_norm = c.qk_norm || c.arch == Arch::Qwen3;
    c.hidden_act = parse_activation(f, c);
    parse_layer_kinds(f, c);
    if (c.architecture == "Qwen3MoeForCausalLM") parse_moe(f, c);
    if (c.arch == Arch::Deepseek) parse_deepseek_moe(f, c);

    if (f.has("bos_token_id")) c.bos_token_id = static_cast<int>(f.integer("bos_token_id", 0, c.vocab_size - 1));
    if (f.has("eos_token_id")) {
        const json& e = f.at("eos_token_id");
        if (e.is_array()) {
            for (const json& v : e)
                c.eos_token_ids.push_back(static_cast<int>(f.integer_value("eos_token_id", v, 0, c.vocab_size - 1)));
        } else {
            c.eos_token_ids.push_back(static_cast<int>(f.integer_value("eos_token_id", e, 0, c.vocab_size - 1)));
        }
    }

    const char* dtype_field = f.has("torch_dtype") ? "torch_dtype" : "dtype";
    if (auto dt = f.string(dtype_field)) {
        if (*dt != "float32" && *dt != "bfloat16" && *dt != "float16")
            f.fail(dtype_field, "unknown dtype '" + untrusted::escape(*dt) + "' (expected float32, bfloat16 or float16)");
        c.torch_dtype = *dt;
    }

    check_unsupported_features(f);
    return c;
}

}  // namespace

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& source) {
    json j;
    try {
        j = untrusted::parse_json(text);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(source + ": " + e.what());
    }
    return parse(j, source);
}

namespace {

double in_open_range(const GgufFile& g, const std::string& key, float v, double lo, double hi) {
    if (!(v > lo && v < hi)) {  // NaN fails too
        std::ostringstream os;
        os << g.path() << ": metadata '" << key << "' must be in (" << lo << ", " << hi << "), got " << v;
        throw std::runtime_error(os.str());
    }
    return v;
}

// An integer key in [lo, hi], or dflt when absent (required without one); errors name the file and the key.
int bounded(const GgufFile& g, const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> dflt = std::nullopt) {
    const auto v = g.opt_int<int64_t>(key);
    if (!v && !dflt) throw std::runtime_error(g.path() + ": missing metadata key '" + key + "'");
    const int64_t x = v ? *v : *dflt;
    if (x < lo || x > hi) {
        std::ostringstream os;
        os << g.path() << ": ";
        if (v) {
            os << "metadata '" << key << "' must be in [" << lo << ", " << hi << "], got " << x;
        } else {
            os << "metadata key '" << key << "' is missing, and its default from the other keys, " << x
               << ", is outside [" << lo << ", " << hi << "]";
        }
        throw std::runtime_error(os.str());
    }
    return static_cast<int>(x);
}

// DeepSeek's YaRN as llama.cpp's converter writes it: rope.scaling.factor, .original_context_length, .yarn_beta_fast /
// _slow (llama.cpp's defaults 32 and 1 when absent) and .yarn_log_multiplier = 0.1 * mscale_all_dim (0: no softmax
// correction). mscale itself is not in the file: llama.cpp's deepseek graphs leave cos/sin unscaled, which is
// transformers' YaRN when mscale == mscale_all_dim (DeepSeek-V3 and V3.2's configs have both 1), what yarn_factors
// requires of a config.json. An explicit attention or extrapolation factor is refused.
void read_gguf_yarn(const GgufFile& g, const std::string& p, ModelConfig& c) {
    for (const char* key : {"rope.scaling.yarn_attn_factor", "rope.scaling.yarn_ext_factor"})
        if (g.find(p + key)) throw std::runtime_error(g.path() + ": metadata '" + p + key + "' is not supported");
    const auto f32 = [&](const char* key, double lo, double hi, std::optional<float> dflt) {
        const auto v = g.opt_f32(p + key);
        if (!v && !dflt) throw std::runtime_error(g.path() + ": missing metadata key '" + p + key + "'");
        return in_open_range(g, p + key, v ? *v : *dflt, lo, hi);
    };
    c.rope_freq_factors = yarn_divisors({f32("rope.scaling.factor", kMinRopeFactor, kMaxRopeFactor, std::nullopt),
                                         static_cast<double>(bounded(g, p + "rope.scaling.original_context_length", 1,
                                                                     kMaxPositions)),
                                         f32("rope.scaling.yarn_beta_fast", 0.0, kInf, 32.0f),
                                         f32("rope.scaling.yarn_beta_slow", 0.0, kInf, 1.0f),
                                         f32("rope.scaling.yarn_log_multiplier", -kInf, kInf, 0.0f)},
                                        c);
}

// DeepSeek-V3 (deepseek2) and V3.2 (deepseek32) as llama.cpp's converter writes them (DeepseekV2Model and
// DeepseekV32Model in its conversion/deepseek.py): the attention as MQA over the latent (head_count_kv 1,
// key_length kv_lora_rank + rope, value_length kv_lora_rank), each head's sizes in key_length_mla (nope + rope) and
// value_length_mla, the rope part in rope.dimension_count; V3.2's MTP layers counted in block_count
// (nextn_predict_layers; not run, as with a folder); the router in expert_* (gating function 2 is sigmoid), the
// dense layers in leading_dense_block_count; the indexer in attention.indexer.*. No moe_layer_freq or topk_method:
// the converter drops them and llama.cpp takes every layer after the dense ones as MoE with noaux_tc selection.
void read_gguf_deepseek(const GgufFile& g, const std::string& p, bool indexer, ModelConfig& c) {
    c.num_hidden_layers -= bounded(g, p + "nextn_predict_layers", 0, c.num_hidden_layers - 1, 0);
    bounded(g, p + "attention.head_count_kv", 1, 1, 1);
    c.num_key_value_heads = c.num_attention_heads;
    ModelConfig::Mla m;
    m.q_lora_rank = bounded(g, p + "attention.q_lora_rank", 1, kMaxHidden);
    m.kv_lora_rank = bounded(g, p + "attention.kv_lora_rank", 1, kMaxHidden);
    m.qk_rope_head_dim = bounded(g, p + "rope.dimension_count", 2, kMaxHeadDim);
    if (m.qk_rope_head_dim % 2 != 0)
        throw std::runtime_error(g.path() + ": metadata '" + p + "rope.dimension_count' must be even (RoPE rotates pairs)");
    m.qk_nope_head_dim = bounded(g, p + "attention.key_length_mla", m.qk_rope_head_dim + 1, kMaxHeadDim) - m.qk_rope_head_dim;
    m.v_head_dim = bounded(g, p + "attention.value_length_mla", 1, kMaxHeadDim);
    // The MQA view's sizes restate the latent's; a file where they disagree is not what the converter writes.
    const auto restates = [&](const char* key, int want, const char* as) {
        const int got = bounded(g, p + key, 1, kMaxHidden + kMaxHeadDim, want);
        if (got != want)
            throw std::runtime_error(g.path() + ": metadata '" + p + key + "' is " + std::to_string(got) + ", but '" + p +
                                     "attention.kv_lora_rank' and '" + p + "rope.dimension_count' make it " + as +
                                     " = " + std::to_string(want));
    };
    restates("attention.key_length", m.kv_lora_rank + m.qk_rope_head_dim, "kv_lora_rank + rope.dimension_count");
    restates("attention.value_length", m.kv_lora_rank, "kv_lora_rank");
    if (indexer) {
        m.index_n_heads = bounded(g, p + "attention.indexer.head_count", 1, kMaxHeads);
        m.index_head_dim = bounded(g, p + "attention.indexer.key_length", m.qk_rope_head_dim, kMaxHeadDim);
        m.index_topk = bounded(g, p + "attention.indexer.top_k", 1, kMaxPositions);
    }
    c.head_dim = m.qk_rope_head_dim;
    c.num_experts = bounded(g, p + "expert_count", 1, kMaxExperts);
    c.num_experts_per_tok = bounded(g, p + "expert_used_count", 1, c.num_experts);
    c.moe_intermediate_size = bounded(g, p + "expert_feed_forward_length", 1, kMaxIntermediate);
    c.norm_topk_prob = g.opt_bool(p + "expert_weights_norm").value_or(false);
    if (bounded(g, p + "expert_gating_func", 0, std::numeric_limits<int>::max()) != 2)
        throw std::runtime_error(g.path() + ": metadata '" + p + "expert_gating_func' must be 2 (sigmoid): only sigmoid "
                                 "router scores are supported");
    m.n_group = bounded(g, p + "expert_group_count", 1, c.num_experts, 1);
    m.topk_group = bounded(g, p + "expert_group_used_count", 1, m.n_group, m.n_group);
    m.routed_scaling_factor = static_cast<float>(in_open_range(
        g, p + "expert_weights_scale", g.opt_f32(p + "expert_weights_scale").value_or(1.0f), 0.0, 1e6));
    m.n_shared_experts = bounded(g, p + "expert_shared_count", 0, 64, 0);
    c.mla = m;
    check_deepseek_groups(c, [&](bool topk, const std::string& msg) {
        throw std::runtime_error(g.path() + ": metadata '" + p + (topk ? "expert_group_used_count" : "expert_group_count") +
                                 "': " + msg);
    });
    set_deepseek_moe_layers(c, bounded(g, p + "leading_dense_block_count", 0, c.num_hidden_layers, 0), 1);
}

// As llama.cpp reads them: rope.scaling.type defaults to linear and "none" never scales; rope.scaling.factor
// (rope.scale_linear in older files; 0 means none) divides every frequency; the tensor rope_freqs.weight holds
// per-pair divisors (Llama 3.1+ "llama3" scaling). Needs head_dim.
void read_gguf_rope_scaling(const GgufFile& g, const std::string& p, ModelConfig& c) {
    const auto type = g.opt_string(p + "rope.scaling.type");
    if (type && *type == "yarn" && c.mla && g.find_tensor("rope_freqs.weight") == nullptr) {
        read_gguf_yarn(g, p, c);
        return;
    }
    if (type && *type != "none" && *type != "linear")
        throw std::runtime_error(g.path() + ": rope scaling '" + untrusted::escape(*type) +
                                 "' is not supported (supported: none, linear, yarn for DeepSeek, and per-pair factors "
                                 "in rope_freqs.weight)");
    if (!type || *type == "linear") {
        const std::string key = g.find(p + "rope.scaling.factor") ? p + "rope.scaling.factor" : p + "rope.scale_linear";
        if (const auto factor = g.opt_f32(key); factor && *factor != 0.0f) {
            c.rope_linear_factor = in_open_range(g, key, *factor, kMinRopeFactor, kMaxRopeFactor);
        }
    }
    const GgufTensor* t = g.find_tensor("rope_freqs.weight");
    if (t == nullptr) return;
    const std::string what = g.path() + ": tensor 'rope_freqs.weight' (per-pair RoPE frequency factors)";
    if (t->ggml_type != 0) throw std::runtime_error(what + " has type " + ggml_type_name(t->ggml_type) + ", expected F32");
    const int64_t n = c.head_dim / 2;
    if (t->dims != std::vector<int64_t>{n})
        throw std::runtime_error(what + " must be a vector of head_dim/2 = " + std::to_string(n) + " elements, got " +
                                 std::to_string(t->numel()) + " in " + std::to_string(t->dims.size()) + " dimension(s)");
    c.rope_freq_factors.resize(static_cast<size_t>(n));
    std::memcpy(c.rope_freq_factors.data(), t->data, static_cast<size_t>(n) * sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
        const float v = c.rope_freq_factors[static_cast<size_t>(i)];
        if (!std::isfinite(v) || !(v > 0.0f))
            throw std::runtime_error(what + ": element " + std::to_string(i) + " is " + std::to_string(v) +
                                     ", not a finite positive factor");
    }
}

// Gemma 3 as llama.cpp reads it: norms stored as 1 + w; every pattern-th layer global (sliding_window_pattern,
// default 6; a per-layer list of bools too); local layers rope with rope.freq_base_swa (default 10000); the query
// scale 1/sqrt(head_dim), 1/sqrt(hidden/heads) for the 62-layer 27B model; the MLP's GELU from ggml's f16 table,
// llama.cpp's numbers.
void read_gguf_gemma3(const GgufFile& g, const std::string& p, ModelConfig& c) {
    c.qk_norm = true;
    c.sandwich_norms = true;
    c.embed_scale = std::sqrt(static_cast<float>(c.hidden_size));
    c.hidden_act = Activation::GeluTanhF16;
    c.query_pre_attn_scalar = c.num_hidden_layers == 62 ? c.hidden_size / c.num_attention_heads : c.head_dim;
    c.rope_local_theta = in_open_range(g, p + "rope.freq_base_swa", g.opt_f32(p + "rope.freq_base_swa").value_or(10000.0f),
                                       kMinRopeTheta, kMaxRopeTheta);
    if (const auto cap = g.opt_f32(p + "final_logit_softcapping"); cap && *cap != 0.0f)
        throw std::runtime_error(g.path() + ": final_logit_softcapping is not supported");
    const int64_t window = g.opt_int<int64_t>(p + "attention.sliding_window").value_or(0);
    if (window < 0 || window > kMaxPositions)
        throw std::runtime_error(g.path() + ": metadata '" + p + "attention.sliding_window' is out of range");
    if (window == 0 || window >= c.max_position_embeddings) return;
    std::vector<uint8_t> sliding(static_cast<size_t>(c.num_hidden_layers));
    const std::string key = p + "attention.sliding_window_pattern";
    const GgufValue* v = g.find(key);
    if (v != nullptr && v->type == GgufType::Array) {
        const std::vector<GgufValue> flags = v->elements();
        if (v->elem_type != GgufType::Bool || flags.size() != sliding.size())
            throw std::runtime_error(g.path() + ": metadata '" + key + "' must be one bool per layer");
        for (size_t i = 0; i < flags.size(); ++i) sliding[i] = flags[i].data[0] != 0;
    } else {
        const int64_t pattern = g.opt_int<int64_t>(key).value_or(6);
        if (pattern < 0 || pattern > kMaxLayers)
            throw std::runtime_error(g.path() + ": metadata '" + key + "' is out of range");
        for (size_t i = 0; i < sliding.size(); ++i)
            sliding[i] = pattern == 0 || i % static_cast<size_t>(pattern) < static_cast<size_t>(pattern - 1);
    }
    c.sliding_window = static_cast<int>(window);
    c.layer_sliding = std::move(sliding);
}

}  // namespace

float ModelConfig::attention_scale() const {
    if (mla) return static_cast<float>(std::pow(mla->qk_nope_head_dim + mla->qk_rope_head_dim, -0.5) * mla->scale_mscale2);
    const double scalar = query_pre_attn_scalar > 0.0 ? query_pre_attn_scalar : head_dim;
    return 1.0f / std::sqrt(static_cast<float>(scalar));
}

std::vector<float> ModelConfig::rope_factors() const {
    if (rope_linear_factor == 1.0 && rope_freq_factors.empty()) return {};
    std::vector<float> out(static_cast<size_t>(head_dim / 2));
    for (size_t i = 0; i < out.size(); ++i)
        out[i] = (rope_freq_factors.empty() ? 1.0f : rope_freq_factors[i]) * static_cast<float>(rope_linear_factor);
    return out;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& g) {
    const std::string arch(g.get_string("general.architecture"));
    ModelConfig c;
    if (arch == "llama") {
        c.arch = Arch::Llama;
    } else if (arch == "qwen2") {
        c.arch = Arch::Qwen2;
    } else if (arch == "qwen3" || arch == "qwen3moe") {
        c.arch = Arch::Qwen3;
    } else if (arch == "gemma3") {
        c.arch = Arch::Gemma3;
    } else if (arch == "deepseek2" || arch == "deepseek32") {
        c.arch = Arch::Deepseek;
    } else {
        throw std::runtime_error(g.path() + ": general.architecture '" + untrusted::escape(arch) +
                                 "' is not supported (supported: llama, qwen2, qwen3, qwen3moe, gemma3, deepseek2, "
                                 "deepseek32)");
    }
    c.architecture = arch;
    const std::string p = arch + ".";
    c.hidden_size = bounded(g, p + "embedding_length", 1, kMaxHidden);
    c.intermediate_size = bounded(g, p + "feed_forward_length", 1, kMaxIntermediate);
    c.num_hidden_layers = bounded(g, p + "block_count", 1, kMaxLayers);
    c.num_attention_heads = bounded(g, p + "attention.head_count", 1, kMaxHeads);
    c.rope_theta = in_open_range(g, p + "rope.freq_base", g.opt_f32(p + "rope.freq_base").value_or(10000.0f),
                                 kMinRopeTheta, kMaxRopeTheta);
    if (c.arch == Arch::Deepseek) {
        read_gguf_deepseek(g, p, arch == "deepseek32", c);
    } else {
        c.num_key_value_heads = bounded(g, p + "attention.head_count_kv", 1, c.num_attention_heads, c.num_attention_heads);
        if (c.num_attention_heads % c.num_key_value_heads != 0)
            throw std::runtime_error(g.path() + ": attention.head_count_kv does not divide attention.head_count");
        const int64_t default_hd = c.hidden_size / c.num_attention_heads;
        c.head_dim = bounded(g, p + "attention.key_length", 2, kMaxHeadDim, default_hd);
        if (bounded(g, p + "attention.value_length", 2, kMaxHeadDim, c.head_dim) != c.head_dim)
            throw std::runtime_error(g.path() + ": attention.value_length different from key_length is not supported");
        if (c.head_dim % 2 != 0) throw std::runtime_error(g.path() + ": head dimension must be even");
        if (bounded(g, p + "rope.dimension_count", 1, kMaxHeadDim, c.head_dim) != c.head_dim)
            throw std::runtime_error(g.path() + ": partial rotary embeddings (rope.dimension_count < head dim) are not supported");
    }
    read_gguf_rope_scaling(g, p, c);
    const float eps = g.get_f32(p + "attention.layer_norm_rms_epsilon");
    if (!(eps > 0.0f && eps < 1.0f)) throw std::runtime_error(g.path() + ": layer_norm_rms_epsilon out of range");
    c.rms_norm_eps = eps;
    const GgufTensor& embd = g.get_tensor("token_embd.weight");
    if (embd.dims.size() != 2 || embd.dims[0] != c.hidden_size)
        throw std::runtime_error(g.path() + ": token_embd.weight does not have embedding_length columns");
    c.vocab_size = bounded(g, p + "vocab_size", 1, kMaxVocab, embd.dims[1]);
    c.max_position_embeddings = bounded(g, p + "context_length", 1, kMaxPositions);
    c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
    c.attention_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.qk_norm = c.arch == Arch::Qwen3;
    if (c.arch == Arch::Gemma3) read_gguf_gemma3(g, p, c);
    if (arch == "qwen3moe") {
        // llama.cpp builds every qwen3moe layer as MoE and always renormalises the chosen experts' weights.
        c.num_experts = bounded(g, p + "expert_count", 1, kMaxExperts);
        c.num_experts_per_tok = bounded(g, p + "expert_used_count", 1, c.num_experts);
        c.moe_intermediate_size = bounded(g, p + "expert_feed_forward_length", 1, kMaxIntermediate);
        c.norm_topk_prob = true;
        c.layer_moe.assign(static_cast<size_t>(c.num_hidden_layers), 1);
    }
    if (auto bos = g.opt_int<int64_t>("tokenizer.ggml.bos_token_id"); bos && *bos >= 0 && *bos < c.vocab_size)
        c.bos_token_id = static_cast<int>(*bos);
    if (auto eos = g.opt_int<int64_t>("tokenizer.ggml.eos_token_id"); eos && *eos >= 0 && *eos < c.vocab_size)
        c.eos_token_ids.push_back(static_cast<int>(*eos));
    return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
    return from_json_text(untrusted::read_regular_file(path, untrusted::kMaxSmallJsonFileBytes), path);
}

}  // namespace tracelm
