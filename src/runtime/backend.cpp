#include "runtime/backend.h"

#include "runtime/op_checks.h"

namespace tracelm {

std::string BackendCapabilities::list(const std::vector<DType>& types) {
    std::string out;
    for (const DType t : types) out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
    return out;
}

void Backend::violation(const std::string& what, const std::string& buffer) const {
    std::string msg = "capture violation: " + what;
    if (!buffer.empty()) msg += " of '" + buffer + "'";
    msg += " inside captured region";
    throw CaptureViolation(msg);
}

Buffer* Backend::alloc(size_t bytes, const std::string& name) {
    if (capturing_) violation("alloc", name);
    return do_alloc(bytes, name);
}

void Backend::free(Buffer* b) {
    if (b == nullptr) return;
    if (capturing_) violation("free", b->name);
    do_free(b);
}

void Backend::upload(const Tensor& dst, const void* src) {
    if (capturing_) violation("upload", dst.name());
    ++uploads_;
    do_upload(dst, src);
}

void Backend::download(const Tensor& src, void* dst) {
    if (capturing_) violation("download", src.name());
    do_download(src, dst);
}

void Backend::synchronize() {
    if (capturing_) violation("synchronize", "");
    do_synchronize();
}

void Backend::begin_capture() {
    if (!supports_capture()) throw std::runtime_error(name() + " backend does not support graph capture");
    if (capturing_) throw CaptureViolation("capture violation: begin_capture inside captured region");
    do_begin_capture();
    capturing_ = true;
}

GraphId Backend::end_capture() {
    if (!capturing_) throw std::logic_error("end_capture without begin_capture");
    capturing_ = false;
    return do_end_capture();
}

void Backend::replay(GraphId g) {
    if (capturing_) violation("replay", "");
    do_replay(g);
}

void Backend::destroy_graph(GraphId g) {
    if (capturing_) violation("destroy_graph", "");
    do_destroy_graph(g);
}

// ---- device ops: the arguments checked once here, then the backend's own code ----

void Backend::copy(const Tensor& dst, const Tensor& src) {
    checks::copy(dst, src);
    do_copy(dst, src);
}

void Backend::embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
    checks::embedding(ids, table, out, capabilities());
    do_embedding(ids, table, out);
}

void Backend::rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
    checks::rms_norm(x, w, out);
    do_rms_norm(x, w, eps, out);
}

void Backend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
    checks::matmul(x, w, bias, out, capabilities());
    do_matmul(x, w, bias, out);
}

void Backend::rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope) {
    checks::rope_neox(x, positions, heads, head_dim, rope, capabilities());
    do_rope_neox(x, positions, heads, head_dim, rope);
}

void Backend::kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                       const Tensor& v_cache) {
    checks::kv_write(k, v, slot_mapping, k_cache, v_cache, capabilities());
    do_kv_write(k, v, slot_mapping, k_cache, v_cache);
}

void Backend::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                        int heads, int kv_heads, int head_dim, float scale, const Tensor& out) {
    checks::attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, out, "attention", capabilities());
    do_attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, scale, out);
}

void Backend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
    checks::elementwise(a, b, out, "add");
    do_add(a, b, out);
}

void Backend::silu_mul(const Tensor& gate, const Tensor& up, const Tensor& out) {
    checks::elementwise(gate, up, out, "silu_mul");
    do_silu_mul(gate, up, out);
}

void Backend::add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out) {
    checks::add_rms_norm(x, delta, w, out);
    do_add_rms_norm(x, delta, w, eps, out);
}

void Backend::qk_norm_rope_kv_write(const QkvPrologue& p) {
    checks::qk_norm_rope_kv_write(p, capabilities());
    do_qk_norm_rope_kv_write(p);
}

void Backend::matmuls(const Tensor& x, std::span<const MatmulOut> outs) {
    checks::matmuls(x, outs, capabilities());
    do_matmuls(x, outs);
}

void Backend::silu_mul_matmul(const Tensor& gate, const Tensor& up, const Tensor& w, const Tensor& out) {
    checks::silu_mul_matmul(gate, up, w, out, capabilities());
    do_silu_mul_matmul(gate, up, w, out);
}

void Backend::gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out) {
    checks::gather_last(x, query_start_loc, out);
    do_gather_last(x, query_start_loc, out);
}

void Backend::argmax(const Tensor& logits, const Tensor& ids) {
    checks::argmax(logits, ids);
    do_argmax(logits, ids);
}

void Backend::advance_decode(const Tensor& sampled, const DecodeState& st) {
    checks::advance_decode(sampled, st);
    do_advance_decode(sampled, st);
}

void Backend::sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                               const Tensor& indices, int heads, int kv_heads, int head_dim, float scale,
                               const Tensor& out) {
    checks::attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, out, "sparse_attention", capabilities());
    checks::sparse_attention_indices(q, indices);
    do_sparse_attention(q, k_cache, v_cache, meta, indices, heads, kv_heads, head_dim, scale, out);
}

}  // namespace tracelm
