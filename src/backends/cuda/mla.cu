// CUDA kernels of multi-head latent attention (ops/mla/mla.h) and the one-pool cache write (launchers declared in
// cuda_ops.h).
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_ops.h"

namespace tracelm::cuda::ops {

namespace {

template <DType C>
__global__ void cache_write_kernel(CacheWriteParts p, const int32_t* slots, void* cache, int64_t width,
                                   int64_t num_slots) {
    const int64_t t = blockIdx.x;
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) return;
    int64_t col = 0;
    for (int i = 0; i < p.count; ++i) {
        for (int64_t c = threadIdx.x; c < p.widths[i]; c += blockDim.x)
            store_kv<C>(cache, slot * width + col + c, p.parts[i][t * p.widths[i] + c]);
        col += p.widths[i];
    }
}

// Block (t * heads + h): thread n computes out n of that head, a dot in k order.
template <DType D>
__global__ void mla_absorb_kernel(const float* x, const void* w, float* out, int heads, int64_t K, int64_t N) {
    const int64_t item = blockIdx.x, h = item % heads;
    const float* xr = x + item * K;
    for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
        const int64_t row = (h * N + n) * K;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc = fmaf(xr[k], load_w<D>(w, row + k), acc);
        out[item * N + n] = acc;
    }
}

constexpr int kMlaThreads = 128;
constexpr int kMlaPerThread = kMaxLatentRow / kMlaThreads;

// Block (t * heads + h): each position's score is a block-wide dot, then every thread updates the online softmax
// (the same values in each) and its own latent elements d = threadIdx.x + i * kMlaThreads.
template <DType C>
__global__ void __launch_bounds__(kMlaThreads) mla_attention_kernel(MlaParams p) {
    __shared__ float partial[32];
    const int64_t item = blockIdx.x, t = item / p.heads;
    const int64_t width = p.latent + p.rope;
    const float* ql = p.q_lat + item * p.latent;
    const float* qp = p.q_pe + item * p.rope;
    int s = 0;
    while (s < p.num_seqs && !(p.query_start[s] <= t && t < p.query_start[s + 1])) ++s;
    int64_t visible = 0;
    const int32_t* table = nullptr;
    if (s < p.num_seqs) {
        const int64_t q_len = p.query_start[s + 1] - p.query_start[s];
        visible = min(static_cast<int64_t>(p.seq_lens[s]) - q_len + (t - p.query_start[s]) + 1,
                      static_cast<int64_t>(p.max_blocks) * p.block_size);
        table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks;
    }
    float acc[kMlaPerThread] = {};
    float m = -kInf, l = 0.0f;
    const int64_t count = p.indices ? p.topk : visible;
    for (int64_t j = 0; j < count; ++j) {
        const int64_t pos = p.indices ? p.indices[t * p.topk + j] : j;
        if (pos < 0 || pos >= visible) continue;
        const int32_t block = table[pos / p.block_size];
        if (block < 0) continue;
        const int64_t slot = static_cast<int64_t>(block) * p.block_size + pos % p.block_size;
        if (slot >= p.num_slots) continue;
        const int64_t base = slot * width;
        float d = 0.0f;
        for (int64_t k = threadIdx.x; k < width; k += kMlaThreads)
            d = fmaf(k < p.latent ? ql[k] : qp[k - p.latent], load_w<C>(p.cache, base + k), d);
        const float score = block_sum(d, partial) * p.scale;
        if (score > m) {
            const float correction = __expf(m - score);
            l *= correction;
#pragma unroll
            for (int i = 0; i < kMlaPerThread; ++i) acc[i] *= correction;
            m = score;
        }
        const float prob = __expf(score - m);
        l += prob;
#pragma unroll
        for (int i = 0; i < kMlaPerThread; ++i) {
            const int64_t k = threadIdx.x + i * kMlaThreads;
            if (k < p.latent) acc[i] = fmaf(prob, load_w<C>(p.cache, base + k), acc[i]);
        }
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int i = 0; i < kMlaPerThread; ++i) {
        const int64_t k = threadIdx.x + i * kMlaThreads;
        if (k < p.latent) p.out[item * p.latent + k] = acc[i] * inv;
    }
}

}  // namespace

void cache_write(const CacheWriteParts& parts, const int32_t* slots, int64_t T, void* cache, DType kv_dt,
                 int64_t width, int64_t num_slots, cudaStream_t stream) {
    if (T == 0) return;
    with_kv_type(kv_dt, [&](auto tag) {
        cache_write_kernel<decltype(tag)::value>
            <<<static_cast<unsigned>(T), 128, 0, stream>>>(parts, slots, cache, width, num_slots);
    });
    check_launch("cache_write");
}

void mla_absorb(const float* x, int64_t T, int heads, int64_t K, const void* w, DType wt, int64_t N, float* out,
                cudaStream_t stream) {
    if (T == 0) return;
    with_weight_type(wt, [&](auto tag) {
        mla_absorb_kernel<decltype(tag)::value>
            <<<static_cast<unsigned>(T * heads), 128, 0, stream>>>(x, w, out, heads, K, N);
    });
    check_launch("mla_absorb");
}

void mla_attention(const MlaParams& p, int64_t T, DType kv_dt, cudaStream_t stream) {
    if (T == 0) return;
    with_kv_type(kv_dt, [&](auto tag) {
        mla_attention_kernel<decltype(tag)::value><<<static_cast<unsigned>(T * p.heads), kMlaThreads, 0, stream>>>(p);
    });
    check_launch("mla_attention");
}

}  // namespace tracelm::cuda::ops
