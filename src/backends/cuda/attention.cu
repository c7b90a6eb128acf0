// CUDA kernels of the attention family: the KV cache write and paged (or sparse) attention with split key ranges (launchers declared in cuda_ops.h).
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

template <DType C>
__global__ void kv_write_kernel(const float* k, const float* v, const int32_t* slots, void* k_cache, void* v_cache,
                                int64_t dim, int64_t num_slots) {
    const int64_t t = blockIdx.x;
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) return;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
        store_kv<C>(k_cache, slot * dim + c, k[t * dim + c]);
        store_kv<C>(v_cache, slot * dim + c, v[t * dim + c]);
    }
}

// Block (t, head) with heads [0, heads) of q then [0, kv_heads) of k: the head is normed (when norm weights
// are given), rotated, written back, and for k heads stored with the matching v head at the token's slot.

constexpr int kAttnWarps = 4;
constexpr int kPerLane = kMaxHeadDim / 32;  // head elements each lane holds
// Keys per warp that make splitting the key range worth a second kernel; at most kMaxSplits splits.
constexpr int64_t kKeysPerWarp = 16;
constexpr int kMaxSplits = 64;
// Decode batches (T up to the largest batch bucket) split the key range; prefill has T*heads blocks already.
constexpr int64_t kSplitMaxT = 32;

// Block (item = t*heads + h, split): an online softmax in f32 per warp over the keys j = (split*warps + warp)
// + i*splits*warps, merged across the warps at the end (query row t sees positions [first, visible), exactly as
// the CPU backend's PagedAttentionItem). With one split the block writes the normalised output; otherwise
// it writes {m, l, acc[head_dim]} to scratch for attention_merge_kernel.
template <DType C>
__global__ void __launch_bounds__(kAttnWarps * 32) attention_kernel(AttentionParams p, float* scratch) {
    __shared__ float s_m[kAttnWarps], s_l[kAttnWarps];
    __shared__ float s_acc[kAttnWarps][kMaxHeadDim];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t item = blockIdx.x;
    const int64_t t = item / p.heads;
    const int h = static_cast<int>(item % p.heads);
    const int split = blockIdx.y, splits = gridDim.y;
    const int hd = p.head_dim;

    int s = 0;
    while (s < p.num_seqs && !(p.query_start[s] <= t && t < p.query_start[s + 1])) ++s;
    int64_t visible = 0, first = 0;
    const int32_t* table = nullptr;
    if (s < p.num_seqs) {
        const int64_t q_len = p.query_start[s + 1] - p.query_start[s];
        visible = static_cast<int64_t>(p.seq_lens[s]) - q_len + (t - p.query_start[s]) + 1;
        if (p.window > 0 && visible > p.window) first = visible - p.window;
        const int64_t capacity = static_cast<int64_t>(p.max_blocks) * p.block_size;
        if (visible > capacity) visible = capacity;
        table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks;
    }
    const float* q = p.q + item * hd;
    const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * hd;
    const int64_t kv_off = static_cast<int64_t>(h / (p.heads / p.kv_heads)) * hd;
    float qv[kPerLane], acc[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
        const int d = j * 32 + lane;
        qv[j] = d < hd ? q[d] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -kInf, l = 0.0f;
    const int64_t n = p.indices != nullptr ? p.topk : visible;
    const int64_t stride = static_cast<int64_t>(splits) * kAttnWarps;
    for (int64_t j = static_cast<int64_t>(split) * kAttnWarps + warp + (p.indices != nullptr ? 0 : first); j < n;
         j += stride) {
        int64_t pos = j;
        if (p.indices != nullptr) {
            pos = p.indices[t * p.topk + j];
            if (pos < 0 || pos >= visible) continue;
        }
        const int32_t block = table[pos / p.block_size];
        if (block < 0) continue;
        const int64_t slot = static_cast<int64_t>(block) * p.block_size + pos % p.block_size;
        if (slot >= p.num_slots) continue;
        const int64_t kv = slot * kv_stride + kv_off;  // element of the head's k and v in the caches
        // v is loaded with k, not after the score: one memory latency a key instead of two.
        float kx[kPerLane], vx[kPerLane];
#pragma unroll
        for (int jj = 0; jj < kPerLane; ++jj) {
            const int d = jj * 32 + lane;
            kx[jj] = d < hd ? load_w<C>(p.k_cache, kv + d) : 0.0f;
            vx[jj] = d < hd ? load_w<C>(p.v_cache, kv + d) : 0.0f;
        }
        float dot = 0.0f;
#pragma unroll
        for (int jj = 0; jj < kPerLane; ++jj) {
            const int d = jj * 32 + lane;
            if (d < hd) dot += qv[jj] * kx[jj];
        }
        const float score = warp_sum(dot) * p.scale;
        if (score > m) {
            const float correction = expf(m - score);
            l *= correction;
#pragma unroll
            for (int jj = 0; jj < kPerLane; ++jj) acc[jj] *= correction;
            m = score;
        }
        const float pr = expf(score - m);
        l += pr;
#pragma unroll
        for (int jj = 0; jj < kPerLane; ++jj) {
            const int d = jj * 32 + lane;
            if (d < hd) acc[jj] += pr * vx[jj];
        }
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
        const int d = j * 32 + lane;
        if (d < hd) s_acc[warp][d] = acc[j];
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
    __syncthreads();

    float M = -kInf;
    for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, s_m[w]);
    float L = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
        if (s_m[w] != -kInf) L += s_l[w] * expf(s_m[w] - M);
    }
    float* part = splits > 1 ? scratch + (item * splits + split) * (hd + 2) : nullptr;
    if (part != nullptr && threadIdx.x == 0) {
        part[0] = M;
        part[1] = L;
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < kAttnWarps; ++w) {
            if (s_m[w] != -kInf) o += s_acc[w][d] * expf(s_m[w] - M);
        }
        if (part != nullptr) {
            part[2 + d] = o;
        } else {
            p.out[item * hd + d] = o * inv;
        }
    }
}

// Merges the splits of one item (grid: T * heads blocks).
__global__ void attention_merge_kernel(const float* scratch, int splits, int hd, float* out) {
    __shared__ float s_w[kMaxSplits], s_l[kMaxSplits];
    const int64_t item = blockIdx.x;
    const float* base = scratch + item * splits * (hd + 2);
    // The first warp finds the maximum and each split's weight once (every thread used to recompute them); the sums
    // below still run over the splits in order, so the output is what a sequential merge gives.
    if (threadIdx.x < 32) {
        float M = -kInf;
        for (int b = threadIdx.x; b < splits; b += 32) M = fmaxf(M, base[b * (hd + 2)]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        for (int b = threadIdx.x; b < splits; b += 32) {
            const float mb = base[b * (hd + 2)];
            s_w[b] = mb != -kInf ? expf(mb - M) : 0.0f;
            s_l[b] = base[b * (hd + 2) + 1];
        }
    }
    __syncthreads();
    float L = 0.0f;
    for (int b = 0; b < splits; ++b) {
        if (s_w[b] != 0.0f) L += s_l[b] * s_w[b];
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int b = 0; b < splits; ++b) {
            if (s_w[b] != 0.0f) o += base[b * (hd + 2) + 2 + d] * s_w[b];
        }
        out[item * hd + d] = o * inv;
    }
}

}  // namespace

void kv_write(const float* k, const float* v, const int32_t* slots, void* k_cache, void* v_cache, DType kv_dt,
              int64_t T, int64_t dim, int64_t num_slots, cudaStream_t stream) {
    if (T == 0) return;
    with_kv_type(kv_dt, [&](auto tag) {
        kv_write_kernel<decltype(tag)::value>
            <<<static_cast<unsigned>(T), 128, 0, stream>>>(k, v, slots, k_cache, v_cache, dim, num_slots);
    });
    check_launch("kv_write");
}

int attention_splits(const AttentionParams& p) {
    if (p.T > kSplitMaxT) return 1;
    // The most keys a row can see is fixed when the step is captured (the block table's capacity, or topk),
    // while the length grows from replay to replay, so the split count follows the capacity.
    const int64_t keys = p.indices != nullptr ? p.topk : static_cast<int64_t>(p.max_blocks) * p.block_size;
    return static_cast<int>(std::clamp<int64_t>(keys / (kKeysPerWarp * kAttnWarps), 1, kMaxSplits));
}

int64_t attention_scratch_floats(const AttentionParams& p, int splits) {
    return splits > 1 ? p.T * p.heads * splits * (p.head_dim + 2) : 0;
}

void attention(const AttentionParams& p, int splits, float* scratch, cudaStream_t stream) {
    const int64_t items = p.T * p.heads;
    if (items == 0) return;
    with_kv_type(p.kv_dt, [&](auto tag) {
        attention_kernel<decltype(tag)::value>
            <<<dim3(static_cast<unsigned>(items), static_cast<unsigned>(splits)), kAttnWarps * 32, 0, stream>>>(p,
                                                                                                            scratch);
    });
    check_launch("attention");
    if (splits > 1) {
        attention_merge_kernel<<<static_cast<unsigned>(items), 128, 0, stream>>>(scratch, splits, p.head_dim, p.out);
        check_launch("attention merge");
    }
}

}  // namespace tracelm::cuda::ops
