// The norm_rope family's entry points: arguments checked once, then the backend's do_<op>.
#include "ops/norm_rope/norm_rope.h"

#include <cmath>
#include <string>

#include "runtime/backend.h"
#include "runtime/op_checks.h"

namespace tracelm {

using checks::require;
using checks::require_dtype;

namespace {

// theta finite and positive; factors empty or head_dim/2 finite positive values.
void check_rope_spec(const RopeSpec& rope, int head_dim, const char* op) {
    require(std::isfinite(rope.theta) && rope.theta > 0.0f, op, "theta must be finite and positive");
    require(rope.factors.empty() || rope.factors.size() == static_cast<size_t>(head_dim / 2), op,
            "rope factors: " + std::to_string(rope.factors.size()) + " given, expected head_dim/2 = " +
                std::to_string(head_dim / 2));
    for (const float f : rope.factors) require(std::isfinite(f) && f > 0.0f, op, "rope factors must be finite and positive");
}

}  // namespace

void Backend::rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
    require_dtype(x, DType::F32, "rms_norm");
    require_dtype(out, DType::F32, "rms_norm");
    checks::norm_weight(w, x.cols, "rms_norm");
    require(out.rows == x.rows && out.cols == x.cols, "rms_norm", "shape mismatch");
    do_rms_norm(x, w, eps, out);
}

void Backend::layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& out) {
    require_dtype(x, DType::F32, "layer_norm");
    require_dtype(out, DType::F32, "layer_norm");
    checks::norm_weight(w, x.cols, "layer_norm");
    checks::norm_weight(b, x.cols, "layer_norm");
    require(b.dtype == w.dtype, "layer_norm", "weight and bias of different types");
    require(out.rows == x.rows && out.cols == x.cols, "layer_norm", "shape mismatch");
    do_layer_norm(x, w, b, eps, out);
}

void Backend::add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out) {
    checks::same_size_f32(x, delta, x, "add_rms_norm");
    require_dtype(out, DType::F32, "add_rms_norm");
    require(delta.rows == x.rows && out.rows == x.rows && out.cols == x.cols, "add_rms_norm", "shape mismatch");
    checks::norm_weight(w, x.cols, "add_rms_norm");
    do_add_rms_norm(x, delta, w, eps, out);
}

void Backend::rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope,
                        int head_stride) {
    require_dtype(x, DType::F32, "rope_neox");
    require_dtype(positions, DType::I32, "rope_neox");
    require(head_dim > 0 && head_dim % 2 == 0 && head_dim <= capabilities().max_head_dim, "rope_neox", "bad head_dim");
    if (head_stride == 0) head_stride = head_dim;
    require(head_stride >= head_dim, "rope_neox", "head_stride below head_dim");
    require(x.cols == static_cast<int64_t>(heads) * head_stride && positions.numel() == x.rows, "rope_neox",
            "shape mismatch on '" + x.name() + "'");
    check_rope_spec(rope, head_dim, "rope_neox");
    do_rope_neox(x, positions, heads, head_dim, rope, head_stride);
}

void Backend::qk_norm_rope_kv_write(const QkvPrologue& p) {
    const char* op = "qk_norm_rope_kv_write";
    for (const Tensor* t : {&p.q, &p.k, &p.v}) require_dtype(*t, DType::F32, op);
    checks::kv_cache(p.k_cache, p.v_cache, op, capabilities());
    require_dtype(p.positions, DType::I32, op);
    require_dtype(p.slot_mapping, DType::I32, op);
    require(p.heads > 0 && p.kv_heads > 0 && p.head_dim > 0 && p.head_dim % 2 == 0 &&
                p.head_dim <= capabilities().max_head_dim,
            op, "bad head geometry");
    const int64_t T = p.q.rows, kv_dim = static_cast<int64_t>(p.kv_heads) * p.head_dim;
    require(p.q.cols == static_cast<int64_t>(p.heads) * p.head_dim && p.k.cols == kv_dim && p.v.cols == kv_dim &&
                p.k.rows == T && p.v.rows == T && p.positions.numel() == T && p.slot_mapping.numel() == T &&
                p.k_cache.cols == kv_dim && p.v_cache.cols == kv_dim && p.k_cache.rows == p.v_cache.rows,
            op, "shape mismatch");
    check_rope_spec(p.rope, p.head_dim, op);
    require((p.q_norm == nullptr) == (p.k_norm == nullptr), op, "q_norm and k_norm must be given together");
    if (p.q_norm != nullptr) {
        require(checks::is_float_weight(p.q_norm->dtype) && p.k_norm->dtype == p.q_norm->dtype &&
                    p.q_norm->numel() == p.head_dim && p.k_norm->numel() == p.head_dim,
                op, "q/k norm weights must be f32/bf16/f16 of length head_dim, of one dtype");
    }
    do_qk_norm_rope_kv_write(p);
}

}  // namespace tracelm
