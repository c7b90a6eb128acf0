#include "checkpoint/gguf_convert.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "formats/gguf.h"
#include "formats/gguf_names.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "runtime/untrusted.h"
#include "tokenizer/gguf_vocab.h"
#include "checkpoint/rng.h"

namespace tracelm {

void add_arch_metadata(GgufWriter& w, const std::string& arch, const ModelConfig& c) {
    w.add_string("general.architecture", arch);
    const std::string p = arch + ".";
    w.add_u32(p + "block_count", static_cast<uint32_t>(c.num_hidden_layers));
    w.add_u32(p + "context_length", static_cast<uint32_t>(c.max_position_embeddings));
    w.add_u32(p + "embedding_length", static_cast<uint32_t>(c.hidden_size));
    w.add_u32(p + "feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
    w.add_u32(p + "attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
    w.add_u32(p + "attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
    w.add_u32(p + "attention.key_length", static_cast<uint32_t>(c.head_dim));
    w.add_u32(p + "attention.value_length", static_cast<uint32_t>(c.head_dim));
    w.add_u32(p + "rope.dimension_count", static_cast<uint32_t>(c.head_dim));
    w.add_f32(p + "rope.freq_base", static_cast<float>(c.rope_theta));
    w.add_f32(p + "attention.layer_norm_rms_epsilon", c.rms_norm_eps);
    w.add_u32(p + "vocab_size", static_cast<uint32_t>(c.vocab_size));
    if (c.num_experts > 0) {
        w.add_u32(p + "expert_count", static_cast<uint32_t>(c.num_experts));
        w.add_u32(p + "expert_used_count", static_cast<uint32_t>(c.num_experts_per_tok));
        w.add_u32(p + "expert_feed_forward_length", static_cast<uint32_t>(c.moe_intermediate_size));
    }
}

namespace {
// RoPE scaling as llama.cpp's converter writes it: linear scaling as rope.scaling.type "linear" with
// rope.scaling.factor, Llama 3.1's per-pair factors as the f32 vector rope_freqs.weight.
void add_rope_scaling(GgufWriter& w, const std::string& arch, const ModelConfig& c) {
    if (c.rope_linear_factor != 1.0) {
        w.add_string(arch + ".rope.scaling.type", "linear");
        w.add_f32(arch + ".rope.scaling.factor", static_cast<float>(c.rope_linear_factor));
    }
    if (!c.rope_freq_factors.empty()) {
        std::vector<uint8_t> bytes(c.rope_freq_factors.size() * sizeof(float));
        std::memcpy(bytes.data(), c.rope_freq_factors.data(), bytes.size());
        w.add_tensor("rope_freqs.weight", DType::F32, {static_cast<int64_t>(c.rope_freq_factors.size())},
                     std::move(bytes));
    }
}

// llama.cpp's converter stores each head's rows i*half+j at 2j+i (interleaved RoPE pairs).
std::vector<uint8_t> permute_heads(const uint8_t* src, size_t bytes, int64_t rows, int heads) {
    std::vector<uint8_t> out(bytes);
    const size_t row = bytes / static_cast<size_t>(rows);
    const int64_t hd = rows / heads, half = hd / 2;
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < half; ++j)
                std::memcpy(out.data() + static_cast<size_t>(h * hd + 2 * j + i) * row,
                            src + static_cast<size_t>(h * hd + i * half + j) * row, row);
    return out;
}

}  // namespace

void convert_to_gguf(const std::string& hf_dir, const std::string& out_path) {
    const ModelConfig c = ModelConfig::from_file(hf_dir + "/config.json");
    // Gemma's file needs its own metadata (window, layer pattern, local RoPE base) and its norms as 1 + w.
    if (c.arch == Arch::Gemma3 || c.sliding_window > 0 || c.num_experts > 0)
        throw std::runtime_error(hf_dir + ": converting " + c.architecture + " to GGUF is not supported yet");
    const std::string arch(arch_name(c.arch));
    const SafetensorsFolder ck(hf_dir);
    GgufWriter w;
    add_arch_metadata(w, arch, c);
    add_rope_scaling(w, arch, c);
    for (const std::string& name : ck.names()) {
        const TensorInfo& t = ck.get(name);
        if (c.tie_word_embeddings && name == "lm_head.weight") continue;
        const auto* data = static_cast<const uint8_t*>(t.data);
        std::vector<uint8_t> bytes(data, data + t.bytes);
        const bool q = name.find("self_attn.q_proj.") != std::string::npos;
        const bool k = name.find("self_attn.k_proj.") != std::string::npos;
        if (c.arch == Arch::Llama && (q || k))
            bytes = permute_heads(data, t.bytes, t.shape[0], q ? c.num_attention_heads : c.num_key_value_heads);
        w.add_tensor(gguf_tensor_name(name), t.dtype, std::vector<int64_t>(t.shape.rbegin(), t.shape.rend()),
                     std::move(bytes));
    }
    w.write(out_path);
}

namespace {

// The Split regex of Qwen2's (and Qwen3's) tokenizer.json, which llama.cpp calls pre-tokenizer "qwen2".
constexpr std::string_view kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

nlohmann::json read_json_file(const std::string& path) {
    const std::string text = untrusted::read_regular_file(path, untrusted::kMaxJsonFileBytes);
    nlohmann::json j;
    try {
        j = untrusted::parse_json(text);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(path + ": " + e.what());
    }
    if (!j.is_object()) throw std::runtime_error(path + ": not a JSON object");
    return j;
}

bool is_qwen2_pre_tokenizer(const nlohmann::json& pre) {
    if (!pre.is_object() || pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers")) return false;
    for (const auto& p : pre["pretokenizers"]) {
        if (p.value("type", "") == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
            p["pattern"].value("Regex", "") == kQwen2SplitRegex)
            return true;
    }
    return false;
}

}  // namespace

void add_bpe_tokenizer_metadata(GgufWriter& w, const std::string& dir, int64_t vocab_size, std::optional<int32_t> bos_id) {
    const std::string tok_path = dir + "/tokenizer.json", cfg_path = dir + "/tokenizer_config.json";
    const nlohmann::json tok = read_json_file(tok_path), cfg = read_json_file(cfg_path);
    auto bad = [&](const std::string& what) { return std::runtime_error(tok_path + ": " + what); };
    if (!tok.contains("model") || tok["model"].value("type", "") != "BPE" || !tok["model"].contains("vocab") ||
        !tok["model"]["vocab"].is_object() || !tok["model"].contains("merges") || !tok["model"]["merges"].is_array())
        throw bad("not a BPE tokenizer with vocab and merges");
    if (!is_qwen2_pre_tokenizer(tok.value("pre_tokenizer", nlohmann::json())))
        throw bad("the pre-tokenizer is not Qwen2's, the only one written to GGUF");

    std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
    std::vector<int32_t> types(static_cast<size_t>(vocab_size), static_cast<int32_t>(GgufTokenType::Unused));
    std::map<std::string, int32_t, std::less<>> ids;
    auto set = [&](const std::string& text, const nlohmann::json& id_json, GgufTokenType type) {
        const int64_t id = id_json.is_number_integer() ? id_json.get<int64_t>() : -1;
        if (id < 0 || id >= vocab_size) throw bad("token '" + text + "' has an id outside the vocabulary");
        tokens[static_cast<size_t>(id)] = text;
        types[static_cast<size_t>(id)] = static_cast<int32_t>(type);
        ids[text] = static_cast<int32_t>(id);
    };
    for (const auto& [text, id] : tok["model"]["vocab"].items()) set(text, id, GgufTokenType::Normal);
    for (const auto& a : tok.value("added_tokens", nlohmann::json::array())) {
        const std::string text = a.value("content", "");
        const bool looks_special = text.size() >= 4 && text.starts_with("<|") && text.ends_with("|>");
        set(text, a.value("id", nlohmann::json()),
            a.value("special", false) || looks_special ? GgufTokenType::Control : GgufTokenType::UserDefined);
    }
    for (size_t i = 0; i < tokens.size(); ++i)
        if (types[i] == static_cast<int32_t>(GgufTokenType::Unused)) tokens[i] = "[PAD" + std::to_string(i) + "]";

    std::vector<std::string> merges;
    for (const auto& m : tok["model"]["merges"]) {
        if (m.is_string()) {
            merges.push_back(m.get<std::string>());
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        } else {
            throw bad("a merge is neither \"a b\" nor [\"a\", \"b\"]");
        }
    }
    // tokenizer_config.json names special tokens by text, either as a string or as {"content": ...}.
    auto special_id = [&](const char* key) -> std::optional<int32_t> {
        if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
        const nlohmann::json& v = cfg[key];
        const std::string text = v.is_string() ? v.get<std::string>() : v.is_object() ? v.value("content", "") : "";
        const auto it = ids.find(text);
        if (it == ids.end()) throw std::runtime_error(cfg_path + ": " + key + " '" + untrusted::escape(text) + "' is not a token");
        return it->second;
    };

    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "qwen2");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_i32_array("tokenizer.ggml.token_type", types);
    w.add_string_array("tokenizer.ggml.merges", merges);
    if (const auto bos = bos_id ? bos_id : special_id("bos_token")) w.add_u32("tokenizer.ggml.bos_token_id", *bos);
    if (const auto eos = special_id("eos_token")) w.add_u32("tokenizer.ggml.eos_token_id", *eos);
    if (const auto pad = special_id("pad_token")) w.add_u32("tokenizer.ggml.padding_token_id", *pad);
    w.add_bool("tokenizer.ggml.add_bos_token", cfg.value("add_bos_token", false));
    if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
        w.add_string("tokenizer.chat_template", cfg["chat_template"].get<std::string>());
}

namespace {

void put_f16(std::vector<uint8_t>& b, size_t at, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(b.data() + at, &h, 2);
}

// Random weights of `rows` x `cols` in dtype, values of order `scale`.
std::vector<uint8_t> random_matrix(DType dt, int64_t rows, int64_t cols, float scale, Xoshiro256& rng) {
    const size_t bytes = static_cast<size_t>(rows) * dtype_row_bytes(dt, cols);
    std::vector<uint8_t> b(bytes);
    auto uniform = [&] { return static_cast<float>(rng.next() >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f; };
    if (!dtype_is_quantized(dt)) {
        for (int64_t i = 0; i < rows * cols; ++i) {
            const float v = uniform() * scale;
            const size_t at = static_cast<size_t>(i) * dtype_size(dt);
            if (dt == DType::F32) {
                std::memcpy(b.data() + at, &v, 4);
            } else if (dt == DType::BF16) {
                const uint16_t h = f32_to_bf16(v);
                std::memcpy(b.data() + at, &h, 2);
            } else {
                put_f16(b, at, v);
            }
        }
        return b;
    }
    for (auto& x : b) x = static_cast<uint8_t>(rng.next() >> 56);
    // Sensible scales over the random quants: blocks reach about +-scale.
    const size_t bb = dtype_block_bytes(dt);
    for (size_t at = 0; at < bytes; at += bb) {
        switch (dt) {
            case DType::Q8_0: put_f16(b, at, scale / 127.0f); break;
            case DType::Q4_0:
            case DType::Q5_0: put_f16(b, at, scale / 16.0f); break;
            // Offsets (min) centred on the mean of the quants so that weights are not all of one sign.
            case DType::Q4_1:
                put_f16(b, at, scale / 16.0f);
                put_f16(b, at + 2, -scale / 2.0f);
                break;
            case DType::Q5_1:
                put_f16(b, at, scale / 16.0f);
                put_f16(b, at + 2, -scale);
                break;
            case DType::Q4_K:
                put_f16(b, at, scale / (8.0f * 63.0f));
                put_f16(b, at + 2, scale / 63.0f);
                break;
            case DType::Q5_K:
                put_f16(b, at, scale / (16.0f * 63.0f));
                put_f16(b, at + 2, scale / 63.0f);
                break;
            case DType::Q6_K: put_f16(b, at + 208, scale / (32.0f * 127.0f)); break;
            default: break;
        }
    }
    return b;
}

}  // namespace

void make_random_gguf(const std::string& arch, DType dtype, uint64_t seed, const std::string& out_path) {
    ModelConfig c;
    c.hidden_size = 256;
    c.intermediate_size = 512;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 64;
    c.rms_norm_eps = 1e-6f;
    c.rope_theta = 10000.0;
    c.vocab_size = 512;
    c.max_position_embeddings = 4096;
    GgufWriter w;
    add_arch_metadata(w, arch, c);
    Xoshiro256 rng(seed);
    const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
    const int64_t qd = c.num_attention_heads * hd, kvd = c.num_key_value_heads * hd;
    auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float scale) {
        w.add_tensor(name, dtype, {cols, rows}, random_matrix(dtype, rows, cols, scale, rng));
    };
    auto vec = [&](const std::string& name, int64_t n, float center, float spread) {
        std::vector<uint8_t> b(static_cast<size_t>(n) * 4);
        for (int64_t i = 0; i < n; ++i) {
            const float v = center + spread * (static_cast<float>(rng.next() >> 40) / static_cast<float>(1 << 24) - 0.5f);
            std::memcpy(b.data() + i * 4, &v, 4);
        }
        w.add_tensor(name, DType::F32, {n}, std::move(b));
    };
    matrix("token_embd.weight", c.vocab_size, H, 1.0f);
    vec("output_norm.weight", H, 1.0f, 0.2f);
    matrix("output.weight", c.vocab_size, H, 0.2f);
    for (int l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        vec(p + "attn_norm.weight", H, 1.0f, 0.2f);
        vec(p + "ffn_norm.weight", H, 1.0f, 0.2f);
        matrix(p + "attn_q.weight", qd, H, 0.15f);
        matrix(p + "attn_k.weight", kvd, H, 0.15f);
        matrix(p + "attn_v.weight", kvd, H, 0.15f);
        matrix(p + "attn_output.weight", H, qd, 0.1f);
        if (arch == "qwen2") {
            vec(p + "attn_q.bias", qd, 0.0f, 0.2f);
            vec(p + "attn_k.bias", kvd, 0.0f, 0.2f);
            vec(p + "attn_v.bias", kvd, 0.0f, 0.2f);
        }
        if (arch == "qwen3") {
            vec(p + "attn_q_norm.weight", hd, 1.0f, 0.2f);
            vec(p + "attn_k_norm.weight", hd, 1.0f, 0.2f);
        }
        matrix(p + "ffn_gate.weight", I, H, 0.1f);
        matrix(p + "ffn_up.weight", I, H, 0.1f);
        matrix(p + "ffn_down.weight", H, I, 0.07f);
    }
    w.write(out_path);
}

}  // namespace tracelm
