#include "model/model.h"

#include <filesystem>
#include <stdexcept>

#include "backends/cpu/paged_attention.h"

namespace tracelm {

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}
}  // namespace

Tensor Model::bind(Backend& backend, const std::string& name, int64_t rows, int64_t cols, bool as_f32) {
    const TensorInfo& info = checkpoint_.get(name);
    const bool vector = rows == 1;
    const bool shape_ok = vector ? (info.shape.size() == 1 && info.shape[0] == cols)
                                 : (info.shape.size() == 2 && info.shape[0] == rows && info.shape[1] == cols);
    if (!shape_ok) {
        throw std::runtime_error("tensor '" + name + "' in " + dir_ + " has shape " + shape_str(info.shape) +
                                 ", expected " + (vector ? shape_str({cols}) : shape_str({rows, cols})));
    }
    if (info.dtype != DType::F32 && info.dtype != DType::BF16 && info.dtype != DType::F16) {
        throw std::runtime_error("tensor '" + name + "' has unsupported dtype " + std::string(dtype_name(info.dtype)));
    }
    Buffer* buf = nullptr;
    DType dt = info.dtype;
    if (as_f32 && info.dtype != DType::F32) {
        std::vector<float> f(static_cast<size_t>(rows * cols));
        const auto* src = static_cast<const uint16_t*>(info.data);
        for (size_t i = 0; i < f.size(); ++i) f[i] = info.dtype == DType::BF16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
        converted_.push_back(std::move(f));
        buf = backend.import_host(converted_.back().data(), converted_.back().size() * sizeof(float), name);
        dt = DType::F32;
    } else {
        buf = backend.import_host(info.data, info.bytes, name);
    }
    return whole(buf, dt, rows, cols);
}

std::unique_ptr<Model> Model::load(const std::string& dir, Backend& backend) {
    namespace fs = std::filesystem;
    if (!fs::is_directory(dir)) throw std::runtime_error("model folder '" + dir + "' does not exist");
    ModelConfig cfg = ModelConfig::from_file((fs::path(dir) / "config.json").string());
    if (cfg.head_dim > cpu::kMaxHeadDim || cfg.head_dim % 2 != 0) {
        throw std::runtime_error("head_dim " + std::to_string(cfg.head_dim) + " is not supported (even, at most " +
                                 std::to_string(cpu::kMaxHeadDim) + ")");
    }
    std::unique_ptr<Model> m(new Model(dir, cfg, Checkpoint(dir)));
    const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, hd = cfg.head_dim;
    const int64_t q_dim = cfg.num_attention_heads * hd, kv_dim = cfg.num_key_value_heads * hd;
    ModelWeights& w = m->weights_;
    w.embed = m->bind(backend, "model.embed_tokens.weight", cfg.vocab_size, H, false);
    w.final_norm = m->bind(backend, "model.norm.weight", 1, H, false);
    const bool has_head = m->checkpoint_.find("lm_head.weight") != nullptr;
    if (!cfg.tie_word_embeddings && !has_head) {
        throw std::runtime_error("missing tensor 'lm_head.weight' in " + dir + " (tie_word_embeddings is false)");
    }
    w.lm_head = has_head && !cfg.tie_word_embeddings ? m->bind(backend, "lm_head.weight", cfg.vocab_size, H, false)
                                                      : w.embed;
    for (int l = 0; l < cfg.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        LayerWeights L;
        L.input_norm = m->bind(backend, p + "input_layernorm.weight", 1, H, false);
        L.post_norm = m->bind(backend, p + "post_attention_layernorm.weight", 1, H, false);
        L.q_proj = m->bind(backend, p + "self_attn.q_proj.weight", q_dim, H, false);
        L.k_proj = m->bind(backend, p + "self_attn.k_proj.weight", kv_dim, H, false);
        L.v_proj = m->bind(backend, p + "self_attn.v_proj.weight", kv_dim, H, false);
        L.o_proj = m->bind(backend, p + "self_attn.o_proj.weight", H, q_dim, false);
        if (cfg.attention_bias) {
            L.q_bias = m->bind(backend, p + "self_attn.q_proj.bias", 1, q_dim, true);
            L.k_bias = m->bind(backend, p + "self_attn.k_proj.bias", 1, kv_dim, true);
            L.v_bias = m->bind(backend, p + "self_attn.v_proj.bias", 1, kv_dim, true);
            // Qwen2 biases q/k/v only; Llama and Qwen3 put attention_bias on o_proj too.
            if (cfg.arch != Arch::Qwen2) L.o_bias = m->bind(backend, p + "self_attn.o_proj.bias", 1, H, true);
        }
        if (cfg.qk_norm) {
            L.q_norm = m->bind(backend, p + "self_attn.q_norm.weight", 1, hd, false);
            L.k_norm = m->bind(backend, p + "self_attn.k_norm.weight", 1, hd, false);
        }
        L.gate_proj = m->bind(backend, p + "mlp.gate_proj.weight", I, H, false);
        L.up_proj = m->bind(backend, p + "mlp.up_proj.weight", I, H, false);
        L.down_proj = m->bind(backend, p + "mlp.down_proj.weight", H, I, false);
        for (const Tensor* t : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj})
            m->decode_weight_bytes_ += t->nbytes();
        w.layers.push_back(std::move(L));
    }
    m->decode_weight_bytes_ += w.lm_head.nbytes();
    return m;
}

}  // namespace tracelm
