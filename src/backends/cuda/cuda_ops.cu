// The CUDA backend's kernels. Activations and the KV cache are f32; weights are f32, bf16 or f16 and are
// widened to f32 as they are read, with f32 accumulation everywhere. Kernels templated on the weight type
// are instantiated for those three types only.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"

namespace tracelm::cuda::ops {

namespace {

constexpr float kInf = INFINITY;

template <DType D>
using WeightTag = std::integral_constant<DType, D>;

// Calls f(WeightTag<D>{}) for the weight type dt.
template <typename F>
void with_weight_type(DType dt, F&& f) {
    switch (dt) {
        case DType::F32: f(WeightTag<DType::F32>{}); return;
        case DType::BF16: f(WeightTag<DType::BF16>{}); return;
        case DType::F16: f(WeightTag<DType::F16>{}); return;
        default: throw std::invalid_argument("cuda: no kernel for weight type " + std::string(dtype_name(dt)));
    }
}

template <DType D>
__device__ __forceinline__ float load_w(const void* p, int64_t i) {
    if constexpr (D == DType::F32) {
        return static_cast<const float*>(p)[i];
    } else if constexpr (D == DType::BF16) {
        return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
    } else {
        return __half2float(static_cast<const __half*>(p)[i]);
    }
}

// Calls f(WeightTag<D>{}) for the KV cache type dt (f32 or f16, as checks::kv_cache allows).
template <typename F>
void with_kv_type(DType dt, F&& f) {
    if (dt == DType::F16) {
        f(WeightTag<DType::F16>{});
    } else {
        f(WeightTag<DType::F32>{});
    }
}

// Stores v at element i of a KV cache of type C (f16: rounded to nearest even). Reads go through load_w<C>.
template <DType C>
__device__ __forceinline__ void store_kv(void* p, int64_t i, float v) {
    if constexpr (C == DType::F16) {
        static_cast<__half*>(p)[i] = __float2half_rn(v);
    } else {
        static_cast<float*>(p)[i] = v;
    }
}

// Eight consecutive weights from element k of a row (16-byte aligned).
template <DType D>
__device__ __forceinline__ void load_w8(const void* row, int64_t k, float (&out)[8]) {
    if constexpr (D == DType::F32) {
        const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(row) + k);
        const float4 a = p[0], b = p[1];
        out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else {
        const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(row) + k);
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if constexpr (D == DType::BF16) {
                out[2 * j] = __uint_as_float(words[j] << 16);
                out[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
            } else {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
                out[2 * j] = f.x;
                out[2 * j + 1] = f.y;
            }
        }
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block, returned to every thread. `shared` holds 32 floats; every thread must call it.
__device__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += shared[w];
    __syncthreads();  // shared is reused by the next call
    return total;
}

unsigned blocks_for(int64_t n, int threads) {
    return static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 1 << 16));
}

// ---- embedding, rms_norm ----

template <DType D>
__global__ void embedding_kernel(const int32_t* ids, const void* table, int64_t vocab, int64_t dim, float* out) {
    const int64_t t = blockIdx.x;
    const int32_t id = ids[t];
    float* o = out + t * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) o[c] = id < 0 || id >= vocab ? 0.0f : load_w<D>(table, id * dim + c);
}

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

// ---- matmul ----

// Tokens one GEMV block handles per pass over the weights.
constexpr int kGemvTokens = 8;
constexpr int kGemvWarps = 8;
// kGemvMaxT (cuda_ops.h) = 4 passes over the weights at most, which L2 mostly serves.
static_assert(kGemvMaxT <= 4 * kGemvTokens);

// One warp's dot products of weight row `row` with tn <= kGemvTokens input rows x[t*K ..] (global or shared
// memory), summed over the warp into every lane's acc. `vec`: K % 8 == 0, row and x 16-byte aligned.
template <DType D>
__device__ __forceinline__ void gemv_row(const float* x, int tn, int64_t K, const void* row, bool vec,
                                         float (&acc)[kGemvTokens]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) acc[t] = 0.0f;
    if (vec) {
        for (int64_t k = lane * 8; k < K; k += 32 * 8) {
            float wv[8];
            load_w8<D>(row, k, wv);
#pragma unroll
            for (int t = 0; t < kGemvTokens; ++t) {
                if (t < tn) {
                    const float4* xp = reinterpret_cast<const float4*>(x + t * K + k);
                    const float4 a = xp[0], b = xp[1];
                    acc[t] += a.x * wv[0] + a.y * wv[1] + a.z * wv[2] + a.w * wv[3] + b.x * wv[4] + b.y * wv[5] +
                              b.z * wv[6] + b.w * wv[7];
                }
            }
        }
    } else {
        for (int64_t k = lane; k < K; k += 32) {
            const float wk = load_w<D>(row, k);
#pragma unroll
            for (int t = 0; t < kGemvTokens; ++t) {
                if (t < tn) acc[t] += x[t * K + k] * wk;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) acc[t] = warp_sum(acc[t]);
}

template <DType D>
__device__ __forceinline__ const void* weight_row(const void* w, int64_t n, int64_t K) {
    constexpr size_t esize = D == DType::F32 ? 4 : 2;
    return static_cast<const char*>(w) + static_cast<size_t>(n) * static_cast<size_t>(K) * esize;
}

// A warp per output row, reading the row once for up to kGemvTokens tokens (blockIdx.y picks them). The rows
// of the segments are numbered end to end, so one launch serves several matrices of one input.
template <DType D>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const float* x, int64_t T, int64_t K, GemvSegments g,
                                                               bool vec) {
    int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
    int s = 0;
    while (s < g.count && n >= g.rows[s]) n -= g.rows[s++];
    if (s == g.count) return;
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kGemvTokens;
    const int tn = static_cast<int>(T - t0 < kGemvTokens ? T - t0 : kGemvTokens);
    float acc[kGemvTokens];
    gemv_row<D>(x + t0 * K, tn, K, weight_row<D>(g.w[s], n, K), vec, acc);
    if ((threadIdx.x & 31) != 0) return;
    const int64_t N = g.rows[s];
    const float b = g.bias[s] != nullptr ? g.bias[s][n] : 0.0f;
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) {
        if (t < tn) g.y[s][(t0 + t) * N + n] = g.bias[s] != nullptr ? acc[t] + b : acc[t];
    }
}

// Tiled GEMM for prefill: a 64x64 tile of y per block, 4x4 per thread, K in steps of 16 through shared memory
// (weights widened to f32 on the way in).
constexpr int kTile = 64, kTileK = 16, kGemmThreads = 256;

template <DType D>
__global__ void __launch_bounds__(kGemmThreads)
    gemm_kernel(const float* x, int64_t T, int64_t K, const void* w, const float* bias, float* y, int64_t N) {
    __shared__ float xs[kTileK][kTile + 4];
    __shared__ float ws[kTileK][kTile + 4];
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTile, n0 = static_cast<int64_t>(blockIdx.x) * kTile;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
#pragma unroll
        for (int i = 0; i < kTile * kTileK / kGemmThreads; ++i) {
            const int idx = tid + i * kGemmThreads, r = idx / kTileK, c = idx % kTileK;
            const int64_t k = k0 + c;
            xs[c][r] = t0 + r < T && k < K ? x[(t0 + r) * K + k] : 0.0f;
            ws[c][r] = n0 + r < N && k < K ? load_w<D>(w, (n0 + r) * K + k) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTileK; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                a[i] = xs[kk][ty * 4 + i];
                b[i] = ws[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t t = t0 + ty * 4 + i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t n = n0 + tx * 4 + j;
            if (t < T && n < N) y[t * N + n] = bias != nullptr ? acc[i][j] + bias[n] : acc[i][j];
        }
    }
}

// ---- rope, kv_write ----

// Pair i's angle at pos, as runtime/rope.h (and the CPU backend) round it: i products by theta_scale, one division.
__device__ float rope_angle(float pos, int i, const RopeFreqs& f) {
    float theta = pos;
    for (int j = 0; j < i; ++j) theta *= f.theta_scale;
    return theta / f.factors[i];
}

__global__ void rope_kernel(float* x, const int32_t* positions, int heads, int head_dim, RopeFreqs f) {
    const int64_t t = blockIdx.x;
    const int half = head_dim / 2;
    const float pos = static_cast<float>(positions[t]);
    float* row = x + t * heads * head_dim;
    for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
        const int h = idx / half, i = idx % half;
        float s, c;
        sincosf(rope_angle(pos, i, f), &s, &c);
        float* v = row + h * head_dim;
        const float x1 = v[i], x2 = v[half + i];
        v[i] = x1 * c - x2 * s;
        v[half + i] = x2 * c + x1 * s;
    }
}

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
        row[i] = r1;
        row[half + i] = r2;
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

// silu_mul fused into the down projection's GEMV: each block first forms silu(gate)*up of its `tpb` tokens in
// shared memory (dynamic, tpb*K floats), then its warps compute output rows as gemv_kernel does.
template <DType D>
__global__ void __launch_bounds__(kGemvWarps * 32) silu_gemv_kernel(const float* gate, const float* up, int64_t T,
                                                                    int64_t K, const void* w, float* y, int64_t N,
                                                                    int tpb, bool vec) {
    extern __shared__ float4 act_storage[];
    float* act = reinterpret_cast<float*>(act_storage);
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * tpb;
    const int tn = static_cast<int>(T - t0 < tpb ? T - t0 : tpb);
    const float* g = gate + t0 * K;
    const float* u = up + t0 * K;
    for (int64_t i = threadIdx.x; i < static_cast<int64_t>(tn) * K; i += blockDim.x) act[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    __syncthreads();
    const int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
    if (n >= N) return;
    float acc[kGemvTokens];
    gemv_row<D>(act, tn, K, weight_row<D>(w, n, K), vec, acc);
    if ((threadIdx.x & 31) != 0) return;
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) {
        if (t < tn) y[(t0 + t) * N + n] = acc[t];
    }
}

// ---- attention ----

constexpr int kAttnWarps = 4;
constexpr int kPerLane = kMaxHeadDim / 32;  // head elements each lane holds
// Keys per warp that make splitting the key range worth a second kernel; at most kMaxSplits splits.
constexpr int64_t kKeysPerWarp = 16;
constexpr int kMaxSplits = 64;
// Decode batches (T up to the largest batch bucket) split the key range; prefill has T*heads blocks already.
constexpr int64_t kSplitMaxT = 32;

// Block (item = t*heads + h, split): an online softmax in f32 per warp over the keys j = (split*warps + warp)
// + i*splits*warps, merged across the warps at the end (query row t sees positions [0, visible), exactly as
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
    int64_t visible = 0;
    const int32_t* table = nullptr;
    if (s < p.num_seqs) {
        const int64_t q_len = p.query_start[s + 1] - p.query_start[s];
        visible = static_cast<int64_t>(p.seq_lens[s]) - q_len + (t - p.query_start[s]) + 1;
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
    for (int64_t j = static_cast<int64_t>(split) * kAttnWarps + warp; j < n; j += stride) {
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
        float dot = 0.0f;
#pragma unroll
        for (int jj = 0; jj < kPerLane; ++jj) {
            const int d = jj * 32 + lane;
            if (d < hd) dot += qv[jj] * load_w<C>(p.k_cache, kv + d);
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
            if (d < hd) acc[jj] += pr * load_w<C>(p.v_cache, kv + d);
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
    const int64_t item = blockIdx.x;
    const float* base = scratch + item * splits * (hd + 2);
    float M = -kInf;
    for (int b = 0; b < splits; ++b) M = fmaxf(M, base[b * (hd + 2)]);
    float L = 0.0f;
    for (int b = 0; b < splits; ++b) {
        const float mb = base[b * (hd + 2)];
        if (mb != -kInf) L += base[b * (hd + 2) + 1] * expf(mb - M);
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int b = 0; b < splits; ++b) {
            const float mb = base[b * (hd + 2)];
            if (mb != -kInf) o += base[b * (hd + 2) + 2 + d] * expf(mb - M);
        }
        out[item * hd + d] = o * inv;
    }
}

// ---- elementwise, gather, argmax, decode state, DSA indexer ----

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__global__ void gather_last_kernel(const float* x, const int32_t* query_start, float* out, int64_t rows, int64_t cols) {
    const int64_t s = blockIdx.x;
    const int64_t r = static_cast<int64_t>(query_start[s + 1]) - 1;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[s * cols + c] = r < 0 || r >= rows ? 0.0f : x[r * cols + c];
}

// A candidate of argmax: the best non-NaN value seen and its index (found == false: none yet).
struct Best {
    float v;
    int64_t i;
    bool found;
};

__device__ __forceinline__ Best better(const Best& a, const Best& b) {
    if (a.found != b.found) return a.found ? a : b;
    if (!a.found || a.v != b.v) return a.v > b.v ? a : b;
    return a.i < b.i ? a : b;
}

__device__ Best shfl_best(const Best& b, int o) {
    return {__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o),
            __shfl_xor_sync(0xffffffffu, static_cast<int>(b.found), o) != 0};
}

constexpr int kArgmaxThreads = 1024;

// One block per row. Each thread scans its strided share in index order (strictly greater keeps the lowest
// index; NaN never compares greater), then the block reduces, lower index winning ties.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* logits, int32_t* ids, int64_t cols) {
    __shared__ Best s_best[kArgmaxThreads / 32];
    const float* row = logits + static_cast<int64_t>(blockIdx.x) * cols;
    Best b{-kInf, 0, false};
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float v = row[i];
        if (!isnan(v) && (!b.found || v > b.v)) b = {v, i, true};
    }
    for (int o = 16; o > 0; o >>= 1) b = better(b, shfl_best(b, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) s_best[warp] = b;
    __syncthreads();
    if (warp == 0) {
        b = lane < static_cast<int>(blockDim.x >> 5) ? s_best[lane] : Best{-kInf, 0, false};
        for (int o = 16; o > 0; o >>= 1) b = better(b, shfl_best(b, o));
        // A row of NaN only gives index 0, as on the CPU.
        if (lane == 0) ids[blockIdx.x] = b.found ? static_cast<int32_t>(b.i) : 0;
    }
}

// The CPU backend's run_advance, one thread per sequence.
__global__ void advance_kernel(AdvanceParams a) {
    const int32_t step = *a.step;
    __syncthreads();  // every thread has read the step before thread 0 advances it
    for (int s = threadIdx.x; s < a.num_seqs; s += blockDim.x) {
        const int32_t id = a.sampled[s];
        if (step >= 0 && step < a.history_rows) a.history[static_cast<int64_t>(step) * a.num_seqs + s] = id;
        a.token_ids[s] = id;
        const int32_t pos = a.positions[s] + 1;
        a.positions[s] = pos;
        a.seq_lens[s] += 1;
        const int32_t blk = pos / a.block_size;
        const int32_t page = blk < a.max_blocks ? a.block_tables[static_cast<int64_t>(s) * a.max_blocks + blk] : -1;
        a.slots[s] = page < 0 ? -1 : page * a.block_size + pos % a.block_size;
    }
    if (threadIdx.x == 0) *a.step = step + 1;
}

__global__ void dsa_indexer_kernel(const float* q, const float* weights, const float* keys, float* scores,
                                   int64_t items, int64_t num_keys, int64_t heads, int64_t dim) {
    for (int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; item < items;
         item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = item / num_keys;
        const float* k = keys + item % num_keys * dim;
        float score = 0.0f;
        for (int64_t h = 0; h < heads; ++h) {
            const float* qh = q + (t * heads + h) * dim;
            float dot = 0.0f;
            for (int64_t d = 0; d < dim; ++d) dot += qh[d] * k[d];
            if (dot > 0.0f) score += weights[t * heads + h] * dot;
        }
        scores[item] = score;
    }
}

}  // namespace

void embedding(const int32_t* ids, int64_t T, const void* table, DType dt, int64_t vocab, int64_t dim, float* out,
               cudaStream_t stream) {
    if (T == 0) return;
    with_weight_type(dt, [&](auto tag) {
        embedding_kernel<decltype(tag)::value><<<static_cast<unsigned>(T), 256, 0, stream>>>(ids, table, vocab, dim, out);
    });
    check_launch("embedding");
}

void rms_norm(const float* x, const void* w, DType wt, float eps, float* out, int64_t rows, int64_t cols,
              cudaStream_t stream) {
    if (rows == 0) return;
    with_weight_type(wt, [&](auto tag) {
        rms_norm_kernel<decltype(tag)::value><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, w, eps, out, cols);
    });
    check_launch("rms_norm");
}

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

void gemv(const float* x, int64_t T, int64_t K, const GemvSegments& g, DType wt, cudaStream_t stream) {
    int64_t rows = 0;
    bool vec = K % 8 == 0 && aligned16(x);
    for (int s = 0; s < g.count; ++s) {
        rows += g.rows[s];
        vec = vec && aligned16(g.w[s]);
    }
    if (T == 0 || rows == 0) return;
    with_weight_type(wt, [&](auto tag) {
        const dim3 grid(static_cast<unsigned>((rows + kGemvWarps - 1) / kGemvWarps),
                        static_cast<unsigned>((T + kGemvTokens - 1) / kGemvTokens));
        gemv_kernel<decltype(tag)::value><<<grid, kGemvWarps * 32, 0, stream>>>(x, T, K, g, vec);
    });
    check_launch("gemv");
}

void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            cudaStream_t stream) {
    if (T == 0 || N == 0) return;
    if (T <= kGemvMaxT) {
        GemvSegments g{};
        g.w[0] = w, g.bias[0] = bias, g.y[0] = y, g.rows[0] = N, g.count = 1;
        gemv(x, T, K, g, wt, stream);
        return;
    }
    with_weight_type(wt, [&](auto tag) {
        const dim3 grid(static_cast<unsigned>((N + kTile - 1) / kTile), static_cast<unsigned>((T + kTile - 1) / kTile));
        gemm_kernel<decltype(tag)::value><<<grid, kGemmThreads, 0, stream>>>(x, T, K, w, bias, y, N);
    });
    check_launch("matmul");
}

void rope_neox(float* x, const int32_t* positions, int64_t T, int heads, int head_dim, const RopeFreqs& f,
               cudaStream_t stream) {
    if (T == 0) return;
    rope_kernel<<<static_cast<unsigned>(T), 128, 0, stream>>>(x, positions, heads, head_dim, f);
    check_launch("rope_neox");
}

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

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(a, b, out, n);
    check_launch("add");
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

namespace {
int g_max_dynamic_shared = 48 * 1024;  // the default limit until init() raises it

// Tokens one silu_gemv block keeps in shared memory (0: K is too large for even one).
int silu_tokens_per_block(int64_t K) {
    return static_cast<int>(std::min<int64_t>(kGemvTokens, g_max_dynamic_shared / (K * static_cast<int64_t>(sizeof(float)))));
}
}  // namespace

void init(int max_dynamic_shared_bytes) {
    g_max_dynamic_shared = max_dynamic_shared_bytes;
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
        with_weight_type(dt, [&](auto tag) {
            check(cudaFuncSetAttribute(silu_gemv_kernel<decltype(tag)::value>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, max_dynamic_shared_bytes),
                  "shared memory limit");
        });
    }
}

bool silu_mul_matmul_fuses(int64_t T, int64_t K) { return T <= kGemvMaxT && K > 0 && silu_tokens_per_block(K) >= 1; }

void silu_mul_matmul(const float* gate, const float* up, int64_t T, int64_t K, const void* w, DType wt, float* y,
                     int64_t N, cudaStream_t stream) {
    if (T == 0 || N == 0) return;
    // No more tokens per block than there are: the shared memory asked for limits how many blocks share an SM.
    const int tpb = static_cast<int>(std::min<int64_t>(silu_tokens_per_block(K), T));
    const bool vec = K % 8 == 0 && aligned16(w);
    const dim3 grid(static_cast<unsigned>((N + kGemvWarps - 1) / kGemvWarps), static_cast<unsigned>((T + tpb - 1) / tpb));
    const size_t smem = static_cast<size_t>(tpb) * static_cast<size_t>(K) * sizeof(float);
    with_weight_type(wt, [&](auto tag) {
        silu_gemv_kernel<decltype(tag)::value><<<grid, kGemvWarps * 32, smem, stream>>>(gate, up, T, K, w, y, N, tpb, vec);
    });
    check_launch("silu_mul_matmul");
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    silu_mul_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(gate, up, out, n);
    check_launch("silu_mul");
}

void gather_last(const float* x, const int32_t* query_start, float* out, int64_t rows, int64_t cols, int64_t seqs,
                 cudaStream_t stream) {
    if (seqs == 0) return;
    gather_last_kernel<<<static_cast<unsigned>(seqs), 256, 0, stream>>>(x, query_start, out, rows, cols);
    check_launch("gather_last");
}

void argmax(const float* logits, int32_t* ids, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows == 0) return;
    argmax_kernel<<<static_cast<unsigned>(rows), kArgmaxThreads, 0, stream>>>(logits, ids, cols);
    check_launch("argmax");
}

void advance_decode(const AdvanceParams& p, cudaStream_t stream) {
    advance_kernel<<<1, static_cast<unsigned>(std::clamp(p.num_seqs, 1, 1024)), 0, stream>>>(p);
    check_launch("advance_decode");
}

void dsa_indexer(const float* q, const float* weights, const float* keys, float* scores, int64_t rows,
                 int64_t num_keys, int64_t heads, int64_t dim, cudaStream_t stream) {
    const int64_t items = rows * num_keys;
    if (items == 0) return;
    dsa_indexer_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(q, weights, keys, scores, items, num_keys, heads,
                                                                     dim);
    check_launch("dsa_indexer");
}

}  // namespace tracelm::cuda::ops
