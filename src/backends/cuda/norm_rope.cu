// CUDA kernels of the norm_rope family: rms_norm, layer_norm, add_rms_norm, NeoX RoPE and the fused Q/K norm + RoPE +
// KV write (launchers declared in cuda_ops.h).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_ops.h"

namespace tracelm::cuda::ops {

namespace {

template <DType D>
__global__ void rms_norm_kernel(const float* x, const void* w, float eps, float* out, int64_t cols) {
    __shared__ float partial[32];
    const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
    float* o = out + static_cast<int64_t>(blockIdx.x) * cols;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
    const float scale = 1.0f / sqrtf(block_sum(ss, partial) / static_cast<float>(cols) + eps);
    // out may alias x: each element is read and written by the same thread, after the sum was taken.
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = xr[c] * scale * load_w<D>(w, c);
}

template <DType D>
__global__ void layer_norm_kernel(const float* x, const void* w, const void* b, float eps, float* out, int64_t cols) {
    __shared__ float partial[32];
    const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
    float* o = out + static_cast<int64_t>(blockIdx.x) * cols;
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += xr[c];
    const float mean = block_sum(sum, partial) / static_cast<float>(cols);
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += (xr[c] - mean) * (xr[c] - mean);
    const float scale = 1.0f / sqrtf(block_sum(ss, partial) / static_cast<float>(cols) + eps);
    // out may alias x: each element is read and written by the same thread, after both sums were taken.
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        o[c] = (xr[c] - mean) * scale * load_w<D>(w, c) + load_w<D>(b, c);
}

template <DType D>
__global__ void add_rms_norm_kernel(float* x, const float* delta, const void* w, float eps, float* out, int64_t cols) {
    __shared__ float partial[32];
    float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
    const float* dr = delta + static_cast<int64_t>(blockIdx.x) * cols;
    float* o = out + static_cast<int64_t>(blockIdx.x) * cols;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = xr[c] + dr[c];
        xr[c] = v;
        ss += v * v;
    }
    const float scale = 1.0f / sqrtf(block_sum(ss, partial) / static_cast<float>(cols) + eps);
    // Each element is read back by the thread that wrote it.
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = xr[c] * scale * load_w<D>(w, c);
}

// Pair i's angle at pos, as runtime/rope.h (and the CPU backend) round it: i products by theta_scale, one division.
__device__ float rope_angle(float pos, int i, const RopeFreqs& f) {
    float theta = pos;
    for (int j = 0; j < i; ++j) theta *= f.theta_scale;
    return theta / f.factors[i];
}

__global__ void rope_kernel(float* x, const int32_t* positions, int heads, int head_dim, int head_stride,
                            RopeFreqs f) {
    const int64_t t = blockIdx.x;
    const int half = head_dim / 2;
    const float pos = static_cast<float>(positions[t]);
    float* row = x + t * heads * head_stride;
    for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
        const int h = idx / half, i = idx % half;
        float s, c;
        sincosf(rope_angle(pos, i, f), &s, &c);
        float* v = row + h * head_stride;
        const float x1 = v[i], x2 = v[half + i];
        v[i] = x1 * c - x2 * s;
        v[half + i] = x2 * c + x1 * s;
    }
}

template <DType D, DType C>
__global__ void qkv_prologue_kernel(QkvPrologueParams p, RopeFreqs f) {
    __shared__ float partial[32];
    __shared__ float vals[kMaxHeadDim];
    const int64_t t = blockIdx.x;
    const bool is_q = static_cast<int>(blockIdx.y) < p.heads;
    const int kh = static_cast<int>(blockIdx.y) - p.heads;  // k head when !is_q
    const int hd = p.head_dim, half = hd / 2;
    const int64_t kv_dim = static_cast<int64_t>(p.kv_heads) * hd;
    float* row = is_q ? p.q + (t * p.heads + blockIdx.y) * hd : p.k + t * kv_dim + static_cast<int64_t>(kh) * hd;
    const void* nw = is_q ? p.q_norm : p.k_norm;
    float scale = 1.0f;
    if (nw != nullptr) {  // uniform over the block
        float ss = 0.0f;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) ss += row[d] * row[d];
        scale = 1.0f / sqrtf(block_sum(ss, partial) / static_cast<float>(hd) + p.eps);
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) vals[d] = nw != nullptr ? row[d] * scale * load_w<D>(nw, d) : row[d];
    __syncthreads();
    const int64_t slot = is_q ? -1 : p.slots[t];
    const bool store = slot >= 0 && slot < p.num_slots;
    const int64_t kc = slot * kv_dim + static_cast<int64_t>(kh) * hd;  // element of the head's k in the cache
    const float pos = static_cast<float>(p.positions[t]);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float sn, cs;
        sincosf(rope_angle(pos, i, f), &sn, &cs);
        const float x1 = vals[i], x2 = vals[half + i];
        const float r1 = x1 * cs - x2 * sn, r2 = x2 * cs + x1 * sn;
        row[i] = is_q ? r1 * p.q_scale : r1;
        row[half + i] = is_q ? r2 * p.q_scale : r2;
        if (store) {
            store_kv<C>(p.k_cache, kc + i, r1);
            store_kv<C>(p.k_cache, kc + half + i, r2);
        }
    }
    if (store) {
        const int64_t off = static_cast<int64_t>(kh) * hd;
        for (int d = threadIdx.x; d < hd; d += blockDim.x)
            store_kv<C>(p.v_cache, slot * kv_dim + off + d, p.v[t * kv_dim + off + d]);
    }
}

}  // namespace

void rms_norm(const float* x, const void* w, DType wt, float eps, float* out, int64_t rows, int64_t cols,
              cudaStream_t stream) {
    if (rows == 0) return;
    with_weight_type(wt, [&](auto tag) {
        rms_norm_kernel<decltype(tag)::value><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, w, eps, out, cols);
    });
    check_launch("rms_norm");
}

void layer_norm(const float* x, const void* w, const void* b, DType wt, float eps, float* out, int64_t rows,
                int64_t cols, cudaStream_t stream) {
    if (rows == 0) return;
    with_weight_type(wt, [&](auto tag) {
        layer_norm_kernel<decltype(tag)::value>
            <<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, w, b, eps, out, cols);
    });
    check_launch("layer_norm");
}

void add_rms_norm(float* x, const float* delta, const void* w, DType wt, float eps, float* out, int64_t rows,
                  int64_t cols, cudaStream_t stream) {
    if (rows == 0) return;
    with_weight_type(wt, [&](auto tag) {
        add_rms_norm_kernel<decltype(tag)::value>
            <<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, delta, w, eps, out, cols);
    });
    check_launch("add_rms_norm");
}

void rope_neox(float* x, const int32_t* positions, int64_t T, int heads, int head_dim, int head_stride,
               const RopeFreqs& f, cudaStream_t stream) {
    if (T == 0) return;
    rope_kernel<<<static_cast<unsigned>(T), 128, 0, stream>>>(x, positions, heads, head_dim, head_stride, f);
    check_launch("rope_neox");
}

void qk_norm_rope_kv_write(const QkvPrologueParams& p, const RopeFreqs& f, cudaStream_t stream) {
    if (p.T == 0) return;
    const dim3 grid(static_cast<unsigned>(p.T), static_cast<unsigned>(p.heads + p.kv_heads));
    with_weight_type(p.q_norm != nullptr ? p.norm_dt : DType::F32, [&](auto norm) {
        with_kv_type(p.kv_dt, [&](auto kv) {
            qkv_prologue_kernel<decltype(norm)::value, decltype(kv)::value><<<grid, 128, 0, stream>>>(p, f);
        });
    });
    check_launch("qk_norm_rope_kv_write");
}

}  // namespace tracelm::cuda::ops
