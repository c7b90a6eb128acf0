// CUDA kernels of the matmul family: matmul: the GEMV of a lane group per row (decode buckets), the tiled GEMM (prefill), SiLU·mul fused into the down projection (launchers declared in cuda_ops.h).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_ops.h"

namespace tracelm::cuda::ops {

namespace {

// Tokens one GEMV block handles per pass over the weights.
constexpr int kGemvTokens = 8;
constexpr int kGemvWarps = 8;
// 16-byte weight loads each lane has in flight in the GEMV (4: a 1024-wide bf16 row in one round).
constexpr int kGemvLoads = 4;
// kGemvMaxT (cuda_ops.h) = 4 passes over the weights at most, which L2 mostly serves.
static_assert(kGemvMaxT <= 4 * kGemvTokens);

// The dot products of weight row `row` with tn <= TOK input rows x[t*K ..] (global or shared memory) by a
// group of L lanes (a power of two, aligned in the warp), summed over the group into every lane's acc. Lane l of the
// group takes elements l*8 + j*L*8 (`vec`: K % 8 == 0, row and x 16-byte aligned; otherwise L is 32 and it takes
// l + j*32). A null row gives sums of 0, but its lanes still join the warp's shuffles. The order depends on K
// alone, never on tn, so a row's answer is the same in every batch.
template <DType D, int TOK>
__device__ __forceinline__ void gemv_row(const float* x, int tn, int64_t K, const void* row, bool vec, int L,
                                         float (&acc)[TOK]) {
    const int l = threadIdx.x & (L - 1);
#pragma unroll
    for (int t = 0; t < TOK; ++t) acc[t] = 0.0f;
    if (row != nullptr && vec) {
        // kGemvLoads weight loads are issued before any is used: a warp alone has too few bytes in flight to cover
        // the memory latency. Each lane still adds its products in ascending k.
        const int64_t step = static_cast<int64_t>(L) * 8;
        for (int64_t k0 = l * 8; k0 < K; k0 += step * kGemvLoads) {
            float wv[kGemvLoads][8];
#pragma unroll
            for (int u = 0; u < kGemvLoads; ++u) {
                if (k0 + u * step < K) load_w8<D>(row, k0 + u * step, wv[u]);
            }
#pragma unroll
            for (int u = 0; u < kGemvLoads; ++u) {
                const int64_t k = k0 + u * step;
                if (k >= K) break;
#pragma unroll
                for (int t = 0; t < TOK; ++t) {
                    if (t < tn) {
                        const float4* xp = reinterpret_cast<const float4*>(x + t * K + k);
                        const float4 a = xp[0], b = xp[1];
                        acc[t] += a.x * wv[u][0] + a.y * wv[u][1] + a.z * wv[u][2] + a.w * wv[u][3] +
                                  b.x * wv[u][4] + b.y * wv[u][5] + b.z * wv[u][6] + b.w * wv[u][7];
                    }
                }
            }
        }
    } else if (row != nullptr) {
        for (int64_t k = l; k < K; k += L) {
            const float wk = load_w<D>(row, k);
#pragma unroll
            for (int t = 0; t < TOK; ++t) {
                if (t < tn) acc[t] += x[t * K + k] * wk;
            }
        }
    }
    // Only the tokens there are: tn is the same in the whole block.
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
        if (t < tn) {
            for (int o = L / 2; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
        }
    }
}

// Lanes per weight row: 32, or for a narrow vectorised row the fewest that cover it 8 elements a lane, so that a
// warp reads several rows at once (an lm_head 64 wide would leave 24 of 32 lanes idle).
int gemv_lanes(int64_t K, bool vec) {
    int L = 32;
    while (vec && L > 1 && (L / 2) * 8 >= K) L /= 2;
    return L;
}

template <DType D>
__device__ __forceinline__ const void* weight_row(const void* w, int64_t n, int64_t K) {
    constexpr size_t esize = D == DType::F32 ? 4 : 2;
    return static_cast<const char*>(w) + static_cast<size_t>(n) * static_cast<size_t>(K) * esize;
}

// A group of L lanes per output row, reading the row once for up to TOK tokens (blockIdx.y picks them). The
// rows of the segments are numbered end to end, so one launch serves several matrices of one input. TOK is the
// smallest of 1, 2, 4, 8 that holds the batch's tokens: registers for more tokens than there are cost occupancy
// (97 registers a thread for 8 tokens against the bandwidth a batch of one needs), and a token's sums do not
// depend on TOK.
template <DType D, int TOK>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const float* x, int64_t T, int64_t K, GemvSegments g,
                                                               bool vec, int L) {
    int64_t n = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5)) * (32 / L) +
                (threadIdx.x & 31) / L;
    int s = 0;
    while (s < g.count && n >= g.rows[s]) n -= g.rows[s++];
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * TOK;
    const int tn = static_cast<int>(T - t0 < TOK ? T - t0 : TOK);
    float acc[TOK];
    gemv_row<D, TOK>(x + t0 * K, tn, K, s < g.count ? weight_row<D>(g.w[s], n, K) : nullptr, vec, L, acc);
    if (s == g.count || (threadIdx.x & (L - 1)) != 0) return;
    const int64_t N = g.rows[s];
    const float b = g.bias[s] != nullptr ? g.bias[s][n] : 0.0f;
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
        if (t < tn) g.y[s][(t0 + t) * N + n] = g.bias[s] != nullptr ? acc[t] + b : acc[t];
    }
}

// Calls f(std::integral_constant<int, TOK>{}) for the smallest TOK of 1, 2, 4, 8 (kGemvTokens) that is >= tokens.
template <typename F>
void with_tokens(int64_t tokens, F&& f) {
    if (tokens <= 1) {
        f(std::integral_constant<int, 1>{});
    } else if (tokens <= 2) {
        f(std::integral_constant<int, 2>{});
    } else if (tokens <= 4) {
        f(std::integral_constant<int, 4>{});
    } else {
        f(std::integral_constant<int, kGemvTokens>{});
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

// glu fused into the down projection's GEMV: each block first forms act(gate)*up of its `tpb` tokens in
// shared memory (dynamic, tpb*K floats), then its warps compute output rows as gemv_kernel does.
template <DType D, int TOK>
__global__ void __launch_bounds__(kGemvWarps * 32) glu_gemv_kernel(const float* gate, const float* up, Activation act_kind,
                                                                   int64_t T, int64_t K, const void* w, float* y,
                                                                   int64_t N, int tpb, bool vec) {
    extern __shared__ float4 act_storage[];
    float* act = reinterpret_cast<float*>(act_storage);
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * tpb;
    const int tn = static_cast<int>(T - t0 < tpb ? T - t0 : tpb);
    const float* g = gate + t0 * K;
    const float* u = up + t0 * K;
    for (int64_t i = threadIdx.x; i < static_cast<int64_t>(tn) * K; i += blockDim.x) act[i] = activate(act_kind, g[i]) * u[i];
    __syncthreads();
    const int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
    if (n >= N) return;  // the whole warp: it reads one row
    float acc[TOK];
    gemv_row<D, TOK>(act, tn, K, weight_row<D>(w, n, K), vec, 32, acc);
    if ((threadIdx.x & 31) != 0) return;
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
        if (t < tn) y[(t0 + t) * N + n] = acc[t];
    }
}

}  // namespace

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
    const int L = gemv_lanes(K, vec);
    const int64_t rows_per_block = kGemvWarps * (32 / L);
    with_weight_type(wt, [&](auto tag) {
        with_tokens(T, [&](auto tok) {
            constexpr int TOK = decltype(tok)::value;
            const dim3 grid(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block),
                            static_cast<unsigned>((T + TOK - 1) / TOK));
            gemv_kernel<decltype(tag)::value, TOK><<<grid, kGemvWarps * 32, 0, stream>>>(x, T, K, g, vec, L);
        });
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

namespace {
int g_max_dynamic_shared = 48 * 1024;  // the default limit until init() raises it

// Tokens one glu_gemv block keeps in shared memory (0: K is too large for even one).
int glu_tokens_per_block(int64_t K) {
    return static_cast<int>(std::min<int64_t>(kGemvTokens, g_max_dynamic_shared / (K * static_cast<int64_t>(sizeof(float)))));
}
}  // namespace

void init(int max_dynamic_shared_bytes) {
    g_max_dynamic_shared = max_dynamic_shared_bytes;
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
        with_weight_type(dt, [&](auto tag) {
            for (const int64_t tokens : {1, 2, 4, kGemvTokens}) {
                with_tokens(tokens, [&](auto tok) {
                    check(cudaFuncSetAttribute(glu_gemv_kernel<decltype(tag)::value, decltype(tok)::value>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, max_dynamic_shared_bytes),
                          "shared memory limit");
                });
            }
        });
    }
}

bool glu_matmul_fuses(int64_t T, int64_t K) { return T <= kGemvMaxT && K > 0 && glu_tokens_per_block(K) >= 1; }

void glu_matmul(const float* gate, const float* up, Activation act, int64_t T, int64_t K, const void* w, DType wt,
                float* y, int64_t N, cudaStream_t stream) {
    if (T == 0 || N == 0) return;
    // No more tokens per block than there are: the shared memory asked for limits how many blocks share an SM.
    const int tpb = static_cast<int>(std::min<int64_t>(glu_tokens_per_block(K), T));
    const bool vec = K % 8 == 0 && aligned16(w);
    const dim3 grid(static_cast<unsigned>((N + kGemvWarps - 1) / kGemvWarps), static_cast<unsigned>((T + tpb - 1) / tpb));
    const size_t smem = static_cast<size_t>(tpb) * static_cast<size_t>(K) * sizeof(float);
    with_weight_type(wt, [&](auto tag) {
        with_tokens(tpb, [&](auto tok) {
            glu_gemv_kernel<decltype(tag)::value, decltype(tok)::value>
                <<<grid, kGemvWarps * 32, smem, stream>>>(gate, up, act, T, K, w, y, N, tpb, vec);
        });
    });
    check_launch("glu_matmul");
}

}  // namespace tracelm::cuda::ops
