#include "runtime/op_checks.h"

#include <cmath>
#include <stdexcept>

namespace tracelm::checks {

void require(bool ok, const char* op, const std::string& what) {
    if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

void require_dtype(const Tensor& t, DType dt, const char* op) {
    require(t.dtype == dt, op,
            "tensor '" + t.name() + "' has dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                std::string(dtype_name(dt)));
}

bool is_float_weight(DType dt) { return dt == DType::F32 || dt == DType::BF16 || dt == DType::F16; }

void copy(const Tensor& dst, const Tensor& src) {
    require(dst.nbytes() == src.nbytes() && dst.rows == src.rows, "copy",
            "size mismatch '" + src.name() + "' -> '" + dst.name() + "'");
}

namespace {

// A weight the backend runs, with whole blocks per row.
void weight(const Tensor& w, const char* op, const BackendCapabilities& caps) {
    require(caps.has_weight_type(w.dtype), op,
            "weight '" + w.name() + "' has type " + std::string(dtype_name(w.dtype)) + ", this backend runs " +
                BackendCapabilities::list(caps.weight_types));
    require(dtype_row_ok(w.dtype, w.cols), op,
            "weight '" + w.name() + "' rows of " + std::to_string(w.cols) + " are not whole " +
                std::string(dtype_name(w.dtype)) + " blocks");
}

}  // namespace

const std::vector<DType>& all_weight_types() {
    static const std::vector<DType> types = {DType::F32,  DType::BF16, DType::F16,  DType::Q8_0, DType::Q4_0,
                                             DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                                             DType::Q6_K, DType::Q8_0_R16, DType::Q4_0_R16, DType::Q4_1_R16,
                                             DType::Q5_0_R16, DType::Q5_1_R16, DType::Q4_K_R16, DType::Q5_K_R16,
                                             DType::Q6_K_R16};
    return types;
}

void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, const BackendCapabilities& caps) {
    require_dtype(ids, DType::I32, "embedding");
    require_dtype(out, DType::F32, "embedding");
    weight(table, "embedding", caps);
    require(out.rows == ids.numel() && out.cols == table.cols, "embedding", "shape mismatch");
}

void rms_norm(const Tensor& x, const Tensor& w, const Tensor& out) {
    require_dtype(x, DType::F32, "rms_norm");
    require_dtype(out, DType::F32, "rms_norm");
    require(is_float_weight(w.dtype) && w.numel() == x.cols, "rms_norm", "weight '" + w.name() + "' length mismatch");
    require(out.rows == x.rows && out.cols == x.cols, "rms_norm", "shape mismatch");
}

void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out, const BackendCapabilities& caps) {
    require_dtype(x, DType::F32, "matmul");
    require_dtype(out, DType::F32, "matmul");
    weight(w, "matmul", caps);
    require(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "matmul",
            "shape mismatch for weight '" + w.name() + "'");
    if (bias != nullptr) {
        require_dtype(*bias, DType::F32, "matmul");
        require(bias->numel() == w.rows, "matmul", "bias length mismatch");
    }
}

void rope_spec(const RopeSpec& rope, int head_dim, const char* op) {
    require(std::isfinite(rope.theta) && rope.theta > 0.0f, op, "theta must be finite and positive");
    require(rope.factors.empty() || rope.factors.size() == static_cast<size_t>(head_dim / 2), op,
            "rope factors: " + std::to_string(rope.factors.size()) + " given, expected head_dim/2 = " +
                std::to_string(head_dim / 2));
    for (const float f : rope.factors) require(std::isfinite(f) && f > 0.0f, op, "rope factors must be finite and positive");
}

void rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope,
               const BackendCapabilities& caps) {
    const int max_head_dim = caps.max_head_dim;
    require_dtype(x, DType::F32, "rope_neox");
    require_dtype(positions, DType::I32, "rope_neox");
    require(head_dim > 0 && head_dim % 2 == 0 && head_dim <= max_head_dim, "rope_neox", "bad head_dim");
    require(x.cols == static_cast<int64_t>(heads) * head_dim && positions.numel() == x.rows, "rope_neox",
            "shape mismatch on '" + x.name() + "'");
    rope_spec(rope, head_dim, "rope_neox");
}

void kv_cache(const Tensor& k_cache, const Tensor& v_cache, const char* op, const BackendCapabilities& caps) {
    require(caps.has_kv_type(k_cache.dtype) && v_cache.dtype == k_cache.dtype, op,
            "the K and V caches must be of one type of " + BackendCapabilities::list(caps.kv_types) + ", not " +
                std::string(dtype_name(k_cache.dtype)) + " and " + std::string(dtype_name(v_cache.dtype)));
}

void kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
              const Tensor& v_cache, const BackendCapabilities& caps) {
    for (const Tensor* t : {&k, &v}) require_dtype(*t, DType::F32, "kv_write");
    kv_cache(k_cache, v_cache, "kv_write", caps);
    require_dtype(slot_mapping, DType::I32, "kv_write");
    require(k.cols == k_cache.cols && v.cols == v_cache.cols && k.cols == v.cols && k.rows == v.rows &&
                slot_mapping.numel() == k.rows && k_cache.rows == v_cache.rows,
            "kv_write", "shape mismatch");
}

void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta, int heads,
               int kv_heads, int head_dim, const Tensor& out, const char* op, const BackendCapabilities& caps) {
    const int max_head_dim = caps.max_head_dim;
    for (const Tensor* t : {&q, &out}) require_dtype(*t, DType::F32, op);
    kv_cache(k_cache, v_cache, op, caps);
    for (const Tensor* t : {&meta.block_tables, &meta.seq_lens, &meta.query_start_loc}) require_dtype(*t, DType::I32, op);
    require(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && head_dim > 0 && head_dim <= max_head_dim, op,
            "bad head geometry");
    require(q.cols == static_cast<int64_t>(heads) * head_dim && out.rows == q.rows && out.cols == q.cols &&
                k_cache.cols == static_cast<int64_t>(kv_heads) * head_dim && v_cache.cols == k_cache.cols,
            op, "shape mismatch");
    require(meta.num_seqs > 0 && meta.block_size > 0 && meta.block_tables.rows >= meta.num_seqs &&
                meta.seq_lens.numel() >= meta.num_seqs && meta.query_start_loc.numel() >= meta.num_seqs + 1,
            op, "bad metadata");
}

void sparse_attention_indices(const Tensor& q, const Tensor& indices) {
    require_dtype(indices, DType::I64, "sparse_attention");
    require(indices.rows == q.rows, "sparse_attention", "indices need one row per query row");
}

void elementwise(const Tensor& a, const Tensor& b, const Tensor& out, const char* op) {
    for (const Tensor* t : {&a, &b, &out}) require_dtype(*t, DType::F32, op);
    require(a.numel() == b.numel() && a.numel() == out.numel(), op, "shape mismatch");
}

void matmuls(const Tensor& x, std::span<const MatmulOut> outs, const BackendCapabilities& caps) {
    require(!outs.empty() && outs.size() <= Backend::kMaxMatmuls, "matmuls",
            "needs 1 to " + std::to_string(Backend::kMaxMatmuls) + " outputs");
    for (const MatmulOut& o : outs) {
        require(o.w != nullptr, "matmuls", "missing weight");
        matmul(x, *o.w, o.bias, o.out, caps);
    }
}

void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, const Tensor& out) {
    elementwise(x, delta, x, "add_rms_norm");
    require_dtype(out, DType::F32, "add_rms_norm");
    require(delta.rows == x.rows && out.rows == x.rows && out.cols == x.cols, "add_rms_norm", "shape mismatch");
    require(is_float_weight(w.dtype) && w.numel() == x.cols, "add_rms_norm",
            "weight '" + w.name() + "' length mismatch");
}

void qk_norm_rope_kv_write(const QkvPrologue& p, const BackendCapabilities& caps) {
    const char* op = "qk_norm_rope_kv_write";
    const int max_head_dim = caps.max_head_dim;
    for (const Tensor* t : {&p.q, &p.k, &p.v}) require_dtype(*t, DType::F32, op);
    kv_cache(p.k_cache, p.v_cache, op, caps);
    require_dtype(p.positions, DType::I32, op);
    require_dtype(p.slot_mapping, DType::I32, op);
    require(p.heads > 0 && p.kv_heads > 0 && p.head_dim > 0 && p.head_dim % 2 == 0 && p.head_dim <= max_head_dim, op,
            "bad head geometry");
    const int64_t T = p.q.rows, kv_dim = static_cast<int64_t>(p.kv_heads) * p.head_dim;
    require(p.q.cols == static_cast<int64_t>(p.heads) * p.head_dim && p.k.cols == kv_dim && p.v.cols == kv_dim &&
                p.k.rows == T && p.v.rows == T && p.positions.numel() == T && p.slot_mapping.numel() == T &&
                p.k_cache.cols == kv_dim && p.v_cache.cols == kv_dim && p.k_cache.rows == p.v_cache.rows,
            op, "shape mismatch");
    rope_spec(p.rope, p.head_dim, op);
    require((p.q_norm == nullptr) == (p.k_norm == nullptr), op, "q_norm and k_norm must be given together");
    if (p.q_norm != nullptr) {
        require(is_float_weight(p.q_norm->dtype) && p.k_norm->dtype == p.q_norm->dtype &&
                    p.q_norm->numel() == p.head_dim && p.k_norm->numel() == p.head_dim,
                op, "q/k norm weights must be f32/bf16/f16 of length head_dim, of one dtype");
    }
}

void silu_mul_matmul(const Tensor& gate, const Tensor& up, const Tensor& w, const Tensor& out,
                     const BackendCapabilities& caps) {
    elementwise(gate, up, gate, "silu_mul_matmul");
    require(up.rows == gate.rows, "silu_mul_matmul", "shape mismatch");
    matmul(gate, w, nullptr, out, caps);
}

void gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out) {
    require_dtype(x, DType::F32, "gather_last");
    require_dtype(out, DType::F32, "gather_last");
    require_dtype(query_start_loc, DType::I32, "gather_last");
    require(out.cols == x.cols && query_start_loc.numel() >= out.rows + 1, "gather_last", "shape mismatch");
}

void argmax(const Tensor& logits, const Tensor& ids) {
    require_dtype(logits, DType::F32, "argmax");
    require_dtype(ids, DType::I32, "argmax");
    require(ids.numel() == logits.rows && logits.cols > 0, "argmax", "shape mismatch");
}

void advance_decode(const Tensor& sampled, const DecodeState& st) {
    for (const Tensor* t : {&sampled, &st.token_ids, &st.positions, &st.slot_mapping, &st.seq_lens, &st.block_tables,
                            &st.step, &st.history})
        require_dtype(*t, DType::I32, "advance_decode");
    const int64_t S = st.token_ids.numel();
    require(sampled.numel() == S && st.positions.numel() == S && st.slot_mapping.numel() == S &&
                st.seq_lens.numel() == S && st.block_tables.rows == S && st.history.cols == S && st.block_size > 0,
            "advance_decode", "shape mismatch");
}

}  // namespace tracelm::checks
