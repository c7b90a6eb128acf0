#include <cstdint>

#include "backends/cpu/ops/op_support.h"

namespace tracelm::cpu {

namespace {

struct RmsNormArgs {
    const float* x;
    const void* w;
    float* out;
    int64_t cols;
    float eps;
    DType wt;
};
void run_rms_norm(const RmsNormArgs& a, int64_t b, int64_t e) { rms_norm(a.x, a.w, a.wt, a.eps, a.out, a.cols, b, e); }

struct LayerNormArgs {
    const float* x;
    const void* w;
    const void* b;
    float* out;
    int64_t cols;
    float eps;
    DType wt;
};
void run_layer_norm(const LayerNormArgs& a, int64_t b, int64_t e) {
    layer_norm(a.x, a.w, a.b, a.wt, a.eps, a.out, a.cols, b, e);
}

struct RopeArgs {
    float* x;
    const int32_t* positions;
    const float* factors;  // null: none
    float theta_scale;
    int heads, head_dim, head_stride;
};
void run_rope(const RopeArgs& a, int64_t b, int64_t e) {
    float cs[kMaxHeadDim];  // rope_cos_sin's layout
    for (int64_t t = b; t < e; ++t) {
        rope_cos_sin(a.positions[t], a.theta_scale, a.factors, a.head_dim / 2, cs);
        float* row = a.x + t * static_cast<int64_t>(a.heads) * a.head_stride;
        if (a.head_stride == a.head_dim) {
            rope_rotate(row, a.heads, a.head_dim, cs);
        } else {
            for (int h = 0; h < a.heads; ++h) rope_rotate(row + static_cast<int64_t>(h) * a.head_stride, 1, a.head_dim, cs);
        }
    }
}

struct AddRmsNormArgs {
    float* x;
    const float* delta;
    const void* w;
    float* out;
    int64_t cols;
    float eps;
    DType wt;
};
// Row by row with the same kernels as add then rms_norm, so the fused op gives their exact numbers.
void run_add_rms_norm(const AddRmsNormArgs& a, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
        float* x = a.x + r * a.cols;
        add(x, a.delta + r * a.cols, x, 0, a.cols);
    }
    rms_norm(a.x, a.w, a.wt, a.eps, a.out, a.cols, b, e);
}

struct QkvPrologueArgs {
    float* q;
    float* k;
    const float* v;
    const void* q_norm;  // null: no norm
    const void* k_norm;
    const int32_t* positions;
    const float* rope_factors;  // null: none
    float theta_scale;
    const int32_t* slots;
    void* k_cache;
    void* v_cache;
    int64_t num_slots;
    float eps;
    DType norm_dt;
    int heads, kv_heads, head_dim;
    bool f16_cache;
    float q_scale;
};
// One token per item: its q and k heads normed (per head, with rms_norm) and rotated (as run_rope, by one set of
// angles), then k and v stored at the token's slot (as run_kv_write).
void run_qkv_prologue(const QkvPrologueArgs& a, int64_t b, int64_t e) {
    const int64_t q_dim = static_cast<int64_t>(a.heads) * a.head_dim, kv_dim = static_cast<int64_t>(a.kv_heads) * a.head_dim;
    float cs[kMaxHeadDim];
    for (int64_t t = b; t < e; ++t) {
        float* q = a.q + t * q_dim;
        float* k = a.k + t * kv_dim;
        if (a.q_norm != nullptr) {
            rms_norm(q, a.q_norm, a.norm_dt, a.eps, q, a.head_dim, 0, a.heads);
            rms_norm(k, a.k_norm, a.norm_dt, a.eps, k, a.head_dim, 0, a.kv_heads);
        }
        rope_cos_sin(a.positions[t], a.theta_scale, a.rope_factors, a.head_dim / 2, cs);
        rope_rotate(q, a.heads, a.head_dim, cs);
        rope_rotate(k, a.kv_heads, a.head_dim, cs);
        if (a.q_scale != 1.0f)
            for (int64_t i = 0; i < q_dim; ++i) q[i] *= a.q_scale;
        const int64_t slot = a.slots[t];
        if (slot < 0 || slot >= a.num_slots) continue;
        store_kv_row(k, a.k_cache, slot, kv_dim, a.f16_cache);
        store_kv_row(a.v + t * kv_dim, a.v_cache, slot, kv_dim, a.f16_cache);
    }
}

}  // namespace

void CpuBackend::do_rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
    submit(run_rms_norm, RmsNormArgs{x.ptr<float>(), w.raw(), out.ptr<float>(), x.cols, eps, w.dtype},
           Footprint().read(x).read(w).write(out), x.rows);
}

void CpuBackend::do_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& out) {
    submit(run_layer_norm, LayerNormArgs{x.ptr<float>(), w.raw(), b.raw(), out.ptr<float>(), x.cols, eps, w.dtype},
           Footprint().read(x).read(w).read(b).write(out), x.rows);
}

const CpuBackend::RopeTable& CpuBackend::rope_table(int head_dim, const RopeSpec& rope) {
    for (const RopeTable& t : rope_tables_)
        if (t.head_dim == head_dim && t.theta == rope.theta && std::ranges::equal(t.factors, rope.factors)) return t;
    RopeTable& t = rope_tables_.emplace_back();
    t.head_dim = head_dim;
    t.theta = rope.theta;
    t.factors.assign(rope.factors.begin(), rope.factors.end());
    t.theta_scale = rope_theta_scale(rope.theta, head_dim);
    return t;
}

void CpuBackend::do_rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope,
                              int head_stride) {
    const RopeTable& t = rope_table(head_dim, rope);
    submit(run_rope,
           RopeArgs{x.ptr<float>(), positions.ptr<int32_t>(), t.factors_or_null(), t.theta_scale, heads, head_dim,
                    head_stride},
           Footprint().read(positions).write(x), x.rows);
}

void CpuBackend::do_add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out) {
    submit(run_add_rms_norm,
           AddRmsNormArgs{x.ptr<float>(), delta.ptr<float>(), w.raw(), out.ptr<float>(), x.cols, eps, w.dtype},
           Footprint().read(delta).read(w).write(x).write(out), x.rows);
}

void CpuBackend::do_qk_norm_rope_kv_write(const QkvPrologue& p) {
    Footprint fp;
    fp.read(p.v).read(p.positions).read(p.slot_mapping).write(p.q).write(p.k).write(p.k_cache).write(p.v_cache);
    if (p.q_norm != nullptr) fp.read(*p.q_norm).read(*p.k_norm);
    const RopeTable& rope = rope_table(p.head_dim, p.rope);
    submit(run_qkv_prologue,
           QkvPrologueArgs{p.q.ptr<float>(), p.k.ptr<float>(), p.v.ptr<float>(), p.q_norm ? p.q_norm->raw() : nullptr,
                           p.k_norm ? p.k_norm->raw() : nullptr, p.positions.ptr<int32_t>(), rope.factors_or_null(),
                           rope.theta_scale, p.slot_mapping.ptr<int32_t>(), p.k_cache.raw(), p.v_cache.raw(),
                           p.k_cache.rows, p.eps, p.q_norm ? p.q_norm->dtype : DType::F32, p.heads, p.kv_heads,
                           p.head_dim, p.k_cache.dtype == DType::F16, p.q_scale},
           fp, p.q.rows);
}

}  // namespace tracelm::cpu
