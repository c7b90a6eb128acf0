#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "formats/gguf_names.h"
#include "formats/repack.h"
#include "model/weight_check.h"
#include "runtime/untrusted.h"

namespace tracelm {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

bool is_float(DType dt) { return dt == DType::F32 || dt == DType::BF16 || dt == DType::F16; }

// Drops the whole pages of [p, p + n) of a read-only file mapping from this process once their bytes have been
// uploaded, so that a loaded model is resident once (in backend memory), not twice. The file stays mapped: a
// later read faults the pages back in from the page cache.
void release_file_pages(const void* p, size_t n) {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    if (b < e) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace

std::optional<Model::Stored> Model::find(const std::string& name) const {
    if (checkpoint_) {
        // A multimodal checkpoint keeps its text model under another prefix (transformers v5's; older files put it
        // under language_model.model.).
        const std::string prefix = "model.";
        std::vector<std::string> names = {name};
        if (config_.weight_prefix != prefix && name.rfind(prefix, 0) == 0)
            names = {config_.weight_prefix + name.substr(prefix.size()), "language_model." + name};
        for (const std::string& n : names)
            if (const TensorInfo* t = checkpoint_->find(n)) return Stored{t->dtype, t->shape, t->data, t->bytes};
        return std::nullopt;
    }
    const GgufTensor* t = gguf_->find_tensor(gguf_tensor_name(name, config_.sandwich_norms));
    if (!t) return std::nullopt;
    // ggml lists dimensions innermost first.
    return Stored{t->require_dtype(), std::vector<int64_t>(t->dims.rbegin(), t->dims.rend()), t->data, t->bytes};
}

Tensor Model::bind_norm(Backend& backend, const std::string& name, int64_t cols) {
    return bind(backend, name, 1, cols, config_.norm_weight_offset != 0.0f, 0, false, config_.norm_weight_offset);
}

Tensor Model::bind(Backend& backend, const std::string& name, int64_t rows, int64_t cols, bool as_f32, int heads,
                   bool matrix, float add, const std::vector<int64_t>& pick) {
    const std::optional<Stored> info = find(name);
    if (!info) throw std::runtime_error("missing tensor '" + name + "' in " + path_);
    const bool vector = rows == 1;
    // GGUF stacks a layer's experts (and DeepSeek's per-head k_b / v_b) in one [n, rows / n, cols] tensor, bound as
    // the [rows, cols] matrix it is.
    const bool stacked = gguf_ && info->shape.size() == 3 && info->shape[0] * info->shape[1] == rows &&
                         info->shape[2] == cols;
    const bool shape_ok = vector ? (info->shape.size() == 1 && info->shape[0] == cols)
                                 : stacked || (info->shape.size() == 2 && info->shape[0] == rows && info->shape[1] == cols);
    if (!shape_ok) {
        throw std::runtime_error("tensor '" + name + "' in " + path_ + " has shape " + shape_str(info->shape) +
                                 ", expected " + (vector ? shape_str({cols}) : shape_str({rows, cols})));
    }
    // Norms and biases are applied elementwise and must be plain floats; matrices may be quantized.
    if (!is_float(info->dtype) && (vector || as_f32 || !dtype_row_ok(info->dtype, cols))) {
        throw std::runtime_error("tensor '" + name + "' has unsupported dtype " + std::string(dtype_name(info->dtype)));
    }
    if (const auto at = first_non_finite(info->dtype, info->data, info->bytes)) {
        throw std::runtime_error("tensor '" + name + "' in " + path_ + " holds NaN or infinity (" +
                                 (dtype_is_quantized(info->dtype) ? "a scale of block " : "element ") +
                                 std::to_string(*at) + "); the weights are broken");
    }
    const void* data = info->data;
    size_t bytes = info->bytes;
    DType dt = info->dtype;
    std::vector<unsigned char> converted;  // reordered or converted weights, until uploaded
    if (!pick.empty()) {
        const size_t row = bytes / static_cast<size_t>(rows);
        std::vector<unsigned char> out(pick.size() * row);
        for (size_t i = 0; i < pick.size(); ++i) {
            if (pick[i] < 0 || pick[i] >= rows) throw std::logic_error("bind: picked row out of range");
            std::memcpy(out.data() + i * row, static_cast<const unsigned char*>(data) + static_cast<size_t>(pick[i]) * row, row);
        }
        converted = std::move(out);
        data = converted.data();
        bytes = converted.size();
        rows = static_cast<int64_t>(pick.size());
    }
    parameters_ += rows * cols;
    if (heads > 0) {
        // Undo llama.cpp's conversion, which stores each head's rows as interleaved (first-half,
        // second-half) pairs so that ggml's pairwise RoPE sees them: row 2j+i of a head holds the
        // original row i*half+j.
        const int64_t n = vector ? cols : rows;
        const size_t row = bytes / static_cast<size_t>(n);
        const int64_t hd = n / heads, half = hd / 2;
        std::vector<unsigned char> out(bytes);
        const auto* src = static_cast<const unsigned char*>(data);
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < 2; ++i)
                for (int64_t j = 0; j < half; ++j)
                    std::memcpy(out.data() + static_cast<size_t>(h * hd + i * half + j) * row,
                                src + static_cast<size_t>(h * hd + 2 * j + i) * row, row);
        converted = std::move(out);
        data = converted.data();
    }
    if (as_f32 && (dt != DType::F32 || add != 0.0f)) {
        std::vector<unsigned char> f(static_cast<size_t>(rows * cols) * sizeof(float));
        const auto* src = static_cast<const uint16_t*>(data);
        for (int64_t i = 0; i < rows * cols; ++i) {
            float v = 0.0f;
            if (dt == DType::F32) {
                const auto* raw = static_cast<const unsigned char*>(data);
                std::memcpy(&v, raw + static_cast<size_t>(i) * sizeof(float), sizeof(float));
            } else {
                v = dt == DType::BF16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
            }
            v += add;  // Gemma's norm weight, 1 + w in f32 as transformers computes it
            std::memcpy(f.data() + static_cast<size_t>(i) * sizeof(float), &v, sizeof(float));
        }
        converted = std::move(f);
        data = converted.data();
        bytes = converted.size();
        dt = DType::F32;
    }
    if (matrix && numerics_ == Numerics::Fast && dtype_repacked(dt) != dt) {
        std::vector<unsigned char> packed(bytes);
        repack_r16(dt, data, packed.data(), rows, cols);
        converted = std::move(packed);
        data = converted.data();
        dt = dtype_repacked(dt);
    }
    ++dtype_counts_[dtype_is_repacked(dt) ? dt : info->dtype];  // the file's type, or what the load made of it
    const Tensor t = whole(backend.alloc(bytes, name), dt, rows, cols);
    backend.upload(t, data);
    release_file_pages(info->data, info->bytes);
    return t;
}

Tensor Model::bind_experts(Backend& backend, const std::string& prefix, const std::string& proj, int64_t rows,
                           int64_t cols) {
    const int64_t E = config_.num_experts;
    if (gguf_) return bind(backend, prefix + "mlp.experts." + proj + ".weight", E * rows, cols, false, 0, true);
    std::vector<unsigned char> stacked;
    std::optional<DType> dt;
    for (int64_t e = 0; e < E; ++e) {
        const std::string name = prefix + "mlp.experts." + std::to_string(e) + "." + proj + ".weight";
        const std::optional<Stored> info = find(name);
        if (!info) throw std::runtime_error("missing tensor '" + name + "' in " + path_);
        if (info->shape != std::vector<int64_t>{rows, cols})
            throw std::runtime_error("tensor '" + name + "' in " + path_ + " has shape " + shape_str(info->shape) +
                                     ", expected " + shape_str({rows, cols}));
        if (!is_float(info->dtype) || (dt && *dt != info->dtype))
            throw std::runtime_error("tensor '" + name + "' has dtype " + std::string(dtype_name(info->dtype)) +
                                     (dt ? ", expected the other experts' " + std::string(dtype_name(*dt))
                                         : std::string(" (experts must be f32, bf16 or f16)")));
        if (const auto at = first_non_finite(info->dtype, info->data, info->bytes))
            throw std::runtime_error("tensor '" + name + "' in " + path_ + " holds NaN or infinity (element " +
                                     std::to_string(*at) + "); the weights are broken");
        dt = info->dtype;
        const auto* src = static_cast<const unsigned char*>(info->data);
        stacked.insert(stacked.end(), src, src + info->bytes);
        release_file_pages(info->data, info->bytes);
    }
    parameters_ += E * rows * cols;
    ++dtype_counts_[*dt];
    const Tensor t = whole(backend.alloc(stacked.size(), prefix + proj + "_exps"), *dt, E * rows, cols);
    backend.upload(t, stacked.data());
    return t;
}

std::unique_ptr<Model> Model::load(const std::string& path, Backend& backend,
                                   const std::function<void(size_t, size_t)>& progress, Numerics numerics) {
    std::unique_ptr<Model> m = open(path);
    m->require_supported(backend.capabilities(), backend.name());
    if (numerics == Numerics::Fast && !backend.capabilities().has_weight_type(DType::Q8_0_R16))
        throw std::runtime_error("backend '" + backend.name() + "' has no fast numerics (use --numerics ggml)");
    m->numerics_ = numerics;
    m->rope_factors_ = m->config_.rope_factors();
    m->bind_all(backend, progress);
    return m;
}

void Model::require_supported(const BackendCapabilities& caps, const std::string& backend) const {
    if (config_.num_experts > 0 && !caps.moe)
        throw std::runtime_error(path_ + ": a mixture-of-experts model (" + std::to_string(config_.num_experts) +
                                 " experts), which backend '" + backend + "' does not run");
    const int hd = config_.head_dim;
    if (hd > caps.max_head_dim || hd % 2 != 0) {
        throw std::runtime_error(path_ + ": head_dim " + std::to_string(hd) + " is not supported by backend '" +
                                 backend + "' (even, at most " + std::to_string(caps.max_head_dim) + ")");
    }
    auto check = [&](std::string_view name, DType dt) {
        if ((is_float(dt) || dtype_is_quantized(dt)) && !caps.has_weight_type(dt)) {
            throw std::runtime_error(path_ + ": weight '" + std::string(name) + "' has type " +
                                     std::string(dtype_name(dt)) + ", which backend '" + backend +
                                     "' does not run (it runs " + BackendCapabilities::list(caps.weight_types) + ")");
        }
    };
    if (checkpoint_) {
        for (const std::string& name : checkpoint_->names()) check(name, checkpoint_->get(name).dtype);
    } else {
        // A type tracelm does not know at all is reported when its tensor is bound.
        for (const GgufTensor& t : gguf_->tensors())
            if (t.dtype) check(t.name, *t.dtype);
    }
}

size_t Model::stored_weight_bytes() const {
    size_t bytes = 0;
    if (checkpoint_) {
        for (const std::string& name : checkpoint_->names()) bytes += checkpoint_->get(name).bytes;
    } else {
        for (const GgufTensor& t : gguf_->tensors()) {
            // DeepSeek's absorbed matrices are widened to f32 at load when quantized (bind_mla).
            const bool widened = t.dtype && dtype_is_quantized(*t.dtype) &&
                                 (t.name.ends_with(".attn_k_b.weight") || t.name.ends_with(".attn_v_b.weight"));
            bytes += widened ? static_cast<size_t>(t.numel()) * sizeof(float) : t.bytes;
        }
    }
    return bytes;
}

std::unique_ptr<Model> Model::open(const std::string& path) {
    namespace fs = std::filesystem;
    std::unique_ptr<Model> m(new Model(path));
    if (fs::is_directory(path)) {
        m->config_ = ModelConfig::from_file((fs::path(path) / "config.json").string());
        m->checkpoint_.emplace(path);
    } else if (fs::is_regular_file(path)) {
        m->gguf_.emplace(path);
        m->config_ = ModelConfig::from_gguf(*m->gguf_);
    } else {
        throw std::runtime_error("model " + untrusted::wrong_kind(path, "a model folder or a .gguf file"));
    }
    return m;
}

LayerWeights::Mla Model::bind_mla(Backend& backend, const std::string& p) {
    const ModelConfig::Mla& m = *config_.mla;
    const int64_t H = config_.hidden_size, heads = config_.num_attention_heads, nope = m.qk_nope_head_dim,
                  rope = m.qk_rope_head_dim, L = m.kv_lora_rank, V = m.v_head_dim, Q = m.q_lora_rank;
    // Row j of a NeoX-ordered rope part is row neox[j] of DeepSeek's interleaved one.
    std::vector<int64_t> neox;
    for (int64_t j = 0; j < rope; j += 2) neox.push_back(j);
    for (int64_t j = 1; j < rope; j += 2) neox.push_back(j);
    const auto rows_of = [](int64_t groups, int64_t stride, int64_t first, const std::vector<int64_t>& within) {
        std::vector<int64_t> rows;
        for (int64_t g = 0; g < groups; ++g)
            for (const int64_t r : within) rows.push_back(g * stride + first + r);
        return rows;
    };
    std::vector<int64_t> all_nope(static_cast<size_t>(nope)), all_latent(static_cast<size_t>(L)), all_v(static_cast<size_t>(V));
    for (std::vector<int64_t>* v : {&all_nope, &all_latent, &all_v})
        for (size_t i = 0; i < v->size(); ++i) (*v)[i] = static_cast<int64_t>(i);
    LayerWeights::Mla w;
    const std::string q_b = p + "self_attn.q_b_proj.weight", kv_a = p + "self_attn.kv_a_proj_with_mqa.weight",
                      kv_b = p + "self_attn.kv_b_proj.weight";
    w.q_a = bind(backend, p + "self_attn.q_a_proj.weight", Q, H, false, 0, true);
    w.q_a_norm = bind_norm(backend, p + "self_attn.q_a_layernorm.weight", Q);
    w.q_nope = bind(backend, q_b, heads * (nope + rope), Q, false, 0, true, 0.0f, rows_of(heads, nope + rope, 0, all_nope));
    w.q_pe = bind(backend, q_b, heads * (nope + rope), Q, false, 0, true, 0.0f, rows_of(heads, nope + rope, nope, neox));
    w.kv_a = bind(backend, kv_a, L + rope, H, false, 0, true, 0.0f, all_latent);
    w.k_pe = bind(backend, kv_a, L + rope, H, false, 0, true, 0.0f, rows_of(1, 0, L, neox));
    w.kv_a_norm = bind_norm(backend, p + "self_attn.kv_a_layernorm.weight", L);
    // mla_absorb multiplies by uk and uv per head in floats. Quantized GGUFs quantize attn_v_b, and attn_k_b where its
    // rows allow (llama.cpp's converter and quantizer do): those are widened to f32 once, on the device, by looking
    // up every row with the backend's embedding, which dequantizes as ggml does.
    const auto absorbed = [&](const Tensor& t, const std::string& name) {
        if (is_float(t.dtype)) return t;
        std::vector<int32_t> ids(static_cast<size_t>(t.rows));
        std::iota(ids.begin(), ids.end(), 0);
        const Tensor rows = whole(backend.alloc(ids.size() * sizeof(int32_t), name + " rows"), DType::I32, t.rows, 1);
        const Tensor f32 = whole(backend.alloc(static_cast<size_t>(t.rows * t.cols) * sizeof(float), name + " (f32)"),
                                 DType::F32, t.rows, t.cols);
        backend.upload(rows, ids.data());
        backend.embedding(rows, t, 1.0f, f32);
        backend.synchronize();
        backend.free(rows.buf);
        backend.free(t.buf);
        return f32;
    };
    if (gguf_) {
        // llama.cpp's converter already split kv_b_proj: k_b [heads, kv_lora, nope] (each head's key rows,
        // transposed) is uk, v_b [heads, v, kv_lora] is uv.
        const std::string k_b = p + "self_attn.k_b_proj.weight", v_b = p + "self_attn.v_b_proj.weight";
        w.uk = absorbed(bind(backend, k_b, heads * L, nope, false), k_b);
        w.uv = absorbed(bind(backend, v_b, heads * V, L, false), v_b);
    } else {
        w.uv = absorbed(bind(backend, kv_b, heads * (nope + V), L, false, 0, false, 0.0f, rows_of(heads, nope + V, nope, all_v)), kv_b);
        // uk[h] = W_UK[h]^T: the nope rows of each head of kv_b_proj, transposed, in the file's float type.
        const Tensor uk_rows = absorbed(
            bind(backend, kv_b, heads * (nope + V), L, false, 0, false, 0.0f, rows_of(heads, nope + V, 0, all_nope)), kv_b);
        const size_t es = dtype_size(uk_rows.dtype);
        std::vector<unsigned char> rows(uk_rows.nbytes()), transposed(uk_rows.nbytes());
        backend.download(uk_rows, rows.data());
        backend.free(uk_rows.buf);
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < nope; ++i)
                for (int64_t j = 0; j < L; ++j)
                    std::memcpy(transposed.data() + static_cast<size_t>((h * L + j) * nope + i) * es,
                                rows.data() + static_cast<size_t>((h * nope + i) * L + j) * es, es);
        w.uk = whole(backend.alloc(transposed.size(), p + "self_attn.uk"), uk_rows.dtype, heads * L, nope);
        backend.upload(w.uk, transposed.data());
    }
    if (m.index_n_heads > 0) {
        const int64_t Hi = m.index_n_heads, Di = m.index_head_dim;
        const std::string ip = p + "self_attn.indexer.";
        w.indexer = LayerWeights::Mla::Indexer{
            bind(backend, ip + "wq_b.weight", Hi * Di, Q, false, 0, true),
            bind(backend, ip + "wk.weight", Di, H, false, 0, true),
            bind(backend, ip + "k_norm.weight", 1, Di, true),
            bind(backend, ip + "k_norm.bias", 1, Di, true),
            bind(backend, ip + "weights_proj.weight", Hi, H, false, 0, true)};
    }
    return w;
}

void Model::bind_all(Backend& backend, const std::function<void(size_t, size_t)>& progress) {
    const ModelConfig& cfg = config_;
    const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, hd = cfg.head_dim;
    const int64_t q_dim = cfg.num_attention_heads * hd, kv_dim = cfg.num_key_value_heads * hd;
    // llama.cpp permutes the q/k rows of llama-architecture GGUFs (not qwen2/qwen3).
    const bool permuted = gguf_ && cfg.arch == Arch::Llama;
    const int q_heads = permuted ? cfg.num_attention_heads : 0, k_heads = permuted ? cfg.num_key_value_heads : 0;
    ModelWeights& w = weights_;
    // Repacked too: a tied head multiplies by it every step, and a lookup reads one row either way.
    w.embed = bind(backend, "model.embed_tokens.weight", cfg.vocab_size, H, false, 0, true);
    w.final_norm = bind_norm(backend, "model.norm.weight", H);
    const bool has_head = find("lm_head.weight").has_value();
    if (!cfg.tie_word_embeddings && !has_head) {
        throw std::runtime_error("missing tensor 'lm_head.weight' in " + path_ + " (tie_word_embeddings is false)");
    }
    w.lm_head = has_head && !cfg.tie_word_embeddings ? bind(backend, "lm_head.weight", cfg.vocab_size, H, false, 0, true)
                                                      : w.embed;
    for (int l = 0; l < cfg.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        LayerWeights L;
        L.input_norm = bind_norm(backend, p + "input_layernorm.weight", H);
        if (cfg.sandwich_norms) {
            L.attn_out_norm = bind_norm(backend, p + "post_attention_layernorm.weight", H);
            L.post_norm = bind_norm(backend, p + "pre_feedforward_layernorm.weight", H);
            L.mlp_out_norm = bind_norm(backend, p + "post_feedforward_layernorm.weight", H);
        } else {
            L.post_norm = bind_norm(backend, p + "post_attention_layernorm.weight", H);
        }
        if (cfg.mla) {
            L.mla = bind_mla(backend, p);
            L.o_proj = bind(backend, p + "self_attn.o_proj.weight", H,
                            static_cast<int64_t>(cfg.num_attention_heads) * cfg.mla->v_head_dim, false, 0, true);
            const LayerWeights::Mla& m = *L.mla;
            for (const Tensor* t : std::initializer_list<const Tensor*>{&m.q_a, &m.q_nope, &m.q_pe, &m.kv_a, &m.k_pe, &m.uk, &m.uv, &L.o_proj})
                decode_weight_bytes_ += t->nbytes();
            if (m.indexer)
                for (const Tensor* t : {&m.indexer->wq, &m.indexer->wk, &m.indexer->weights})
                    decode_weight_bytes_ += t->nbytes();
        } else {
            L.q_proj = bind(backend, p + "self_attn.q_proj.weight", q_dim, H, false, q_heads, true);
            L.k_proj = bind(backend, p + "self_attn.k_proj.weight", kv_dim, H, false, k_heads, true);
            L.v_proj = bind(backend, p + "self_attn.v_proj.weight", kv_dim, H, false, 0, true);
            L.o_proj = bind(backend, p + "self_attn.o_proj.weight", H, q_dim, false, 0, true);
            for (const Tensor* t : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj}) decode_weight_bytes_ += t->nbytes();
        }
        if (cfg.attention_bias) {
            L.q_bias = bind(backend, p + "self_attn.q_proj.bias", 1, q_dim, true, q_heads);
            L.k_bias = bind(backend, p + "self_attn.k_proj.bias", 1, kv_dim, true, k_heads);
            L.v_bias = bind(backend, p + "self_attn.v_proj.bias", 1, kv_dim, true);
            // Qwen2 biases q/k/v only; Llama and Qwen3 put attention_bias on o_proj too.
            if (cfg.arch != Arch::Qwen2 && find(p + "self_attn.o_proj.bias"))
                L.o_bias = bind(backend, p + "self_attn.o_proj.bias", 1, H, true);
        }
        if (cfg.qk_norm) {
            L.q_norm = bind_norm(backend, p + "self_attn.q_norm.weight", hd);
            L.k_norm = bind_norm(backend, p + "self_attn.k_norm.weight", hd);
        }
        if (cfg.is_moe(l)) {
            const int64_t E = cfg.num_experts, MI = cfg.moe_intermediate_size;
            LayerWeights::Experts x;
            x.router = bind(backend, p + "mlp.gate.weight", E, H, true);  // f32, as llama.cpp keeps it
            x.gate = bind_experts(backend, p, "gate_proj", MI, H);
            x.up = bind_experts(backend, p, "up_proj", MI, H);
            x.down = bind_experts(backend, p, "down_proj", H, MI);
            if (cfg.mla) {
                x.selection_bias = bind(backend, p + "mlp.gate.e_score_correction_bias", 1, E, true);
                const int64_t SI = MI * cfg.mla->n_shared_experts;
                if (SI > 0) {
                    L.gate_proj = bind(backend, p + "mlp.shared_experts.gate_proj.weight", SI, H, false, 0, true);
                    L.up_proj = bind(backend, p + "mlp.shared_experts.up_proj.weight", SI, H, false, 0, true);
                    L.down_proj = bind(backend, p + "mlp.shared_experts.down_proj.weight", H, SI, false, 0, true);
                    for (const Tensor* t : {&L.gate_proj, &L.up_proj, &L.down_proj}) decode_weight_bytes_ += t->nbytes();
                }
            }
            // A token reads the router and its k experts' matrices.
            decode_weight_bytes_ += x.router.nbytes() + (x.gate.nbytes() + x.up.nbytes() + x.down.nbytes()) /
                                                            static_cast<size_t>(E) *
                                                            static_cast<size_t>(cfg.num_experts_per_tok);
            L.experts = std::move(x);
        } else {
            L.gate_proj = bind(backend, p + "mlp.gate_proj.weight", I, H, false, 0, true);
            L.up_proj = bind(backend, p + "mlp.up_proj.weight", I, H, false, 0, true);
            L.down_proj = bind(backend, p + "mlp.down_proj.weight", H, I, false, 0, true);
            for (const Tensor* t : {&L.gate_proj, &L.up_proj, &L.down_proj}) decode_weight_bytes_ += t->nbytes();
        }
        w.layers.push_back(std::move(L));
        if (progress) progress(static_cast<size_t>(l + 1), static_cast<size_t>(cfg.num_hidden_layers));
    }
    decode_weight_bytes_ += w.lm_head.nbytes();
}

}  // namespace tracelm
