// AVX2 + FMA + F16C kernels, compiled with those flags and reached only through the dispatch table on CPUs
// that have them. Everything here is internal and self-contained (see kernels_internal.h for why).
//
// matmul sums in one fixed order on every code path, which makes each output independent of the row
// range and batch size it was computed in: K is cut into blocks of kBlock; within a block, lane j of an
// 8-wide f32 accumulator collects x[k]*w[k] for k = j (mod 8) in increasing k by fused multiply-add (a
// partial last chunk is zero padded); the lanes of a block are summed as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7));
// block sums are added in order to 0.0f; the bias comes last.
// For bf16 weights the same order applies to x and w with every chunk of 16 columns (the last one zero
// padded) permuted to its 8 even columns followed by its 8 odd ones: one 32-byte load then yields both
// halves as f32 with a shift and a mask, where converting 8 in order costs a widening shuffle, and at one
// thread per core the decode matvec is limited by those conversion uops, not by memory.
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kernels_internal.h"

namespace tracelm::cpu::avx2 {
namespace {

constexpr int64_t kBlock = 512;
// Up to this many tokens, converting weights in registers for every 4-token group beats converting them
// once into a panel (measured: 50-55 vs 25-45 GFLOP/s at T = 5..32; 45 vs 60 at T = 128).
constexpr int64_t kStreamedMaxT = 48;
// Prefill tiling: a panel of kPanelRows weight rows x kBlock columns is converted to f32 once and reused
// from L2 for up to kTokenTile tokens.
constexpr int64_t kPanelRows = 48;
constexpr int64_t kTokenTile = 128;
// Panel rows are one cache line longer than kBlock so that they do not all map to the same L1 sets.
constexpr int64_t kPanelStride = kBlock + 16;

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

alignas(32) constexpr int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
// Lanes [0, n) set, 0 <= n <= 8.
__m256i lane_mask(int64_t n) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - n)); }

__m128i load8x16(const uint16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// n < 8 halfwords, zero padded; only reached for the last chunk of a row.
__m128i load8x16_part(const uint16_t* p, int64_t n) {
    alignas(16) uint16_t tmp[8] = {};
    for (int64_t i = 0; i < n; ++i) tmp[i] = p[i];
    return _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
}

// Weight loaders. A chunk is 8 * kHalves consecutive weights; load(p, h) gives half h of the chunk at p as
// 8 f32, load_part(p, n, h) the same for a last chunk of n < 8 * kHalves weights (the rest zero). With
// kPermuted the halves are not in column order, so x must come permuted and zero padded the same way
// (permute_chunks).
struct F32W {
    using Elem = float;
    static constexpr int kHalves = 1;
    static constexpr bool kPermuted = false;
    static __m256 load(const float* p, int) { return _mm256_loadu_ps(p); }
    static __m256 load_part(const float* p, int64_t n, int) { return _mm256_maskload_ps(p, lane_mask(n)); }
};
struct F16W {
    using Elem = uint16_t;
    static constexpr int kHalves = 1;
    static constexpr bool kPermuted = false;
    static __m256 load(const uint16_t* p, int) { return _mm256_cvtph_ps(load8x16(p)); }
    static __m256 load_part(const uint16_t* p, int64_t n, int) { return _mm256_cvtph_ps(load8x16_part(p, n)); }
};
struct BF16W {
    using Elem = uint16_t;
    static constexpr int kHalves = 2;
    static constexpr bool kPermuted = true;
    // Half 0 holds the even columns (each 32-bit word's low halfword, shifted up), half 1 the odd ones.
    static __m256 half(__m256i v, int h) {
        return _mm256_castsi256_ps(h == 0 ? _mm256_slli_epi32(v, 16)
                                          : _mm256_and_si256(v, _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u))));
    }
    static __m256 load(const uint16_t* p, int h) { return half(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), h); }
    static __m256 load_part(const uint16_t* p, int64_t n, int h) {
        alignas(32) uint16_t tmp[16] = {};
        for (int64_t i = 0; i < n; ++i) tmp[i] = p[i];
        return half(_mm256_load_si256(reinterpret_cast<const __m256i*>(tmp)), h);
    }
};

int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// T rows of x (K columns) into rows of ldx = round_up16(K) columns, each chunk of 16 permuted to its even
// columns then its odd ones and the last chunk zero padded: the x that BF16W weights pair with.
const float* permute_chunks(const float* x, int64_t T, int64_t K, int64_t ldx, float* out) {
    for (int64_t t = 0; t < T; ++t) {
        const float* src = x + t * K;
        float* dst = out + t * ldx;
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            const __m256 a = _mm256_loadu_ps(src + k), b = _mm256_loadu_ps(src + k + 8);
            // Within 128-bit lanes: (a0 a2 b0 b2 | a4 a6 b4 b6); the 64-bit permute puts the a pairs first.
            const __m256 even = _mm256_shuffle_ps(a, b, 0x88), odd = _mm256_shuffle_ps(a, b, 0xdd);
            _mm256_storeu_ps(dst + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xd8)));
            _mm256_storeu_ps(dst + k + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xd8)));
        }
        if (k < K) {
            float tmp[16] = {};
            for (int64_t i = 0; k + i < K; ++i) tmp[i] = src[k + i];
            for (int j = 0; j < 8; ++j) {
                dst[k + j] = tmp[2 * j];
                dst[k + 8 + j] = tmp[2 * j + 1];
            }
        }
    }
    return out;
}

// Lane sums of a, b, c, d, each as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
__m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

float hsum(__m256 a) { return _mm_cvtss_f32(hsum4(a, a, a, a)); }

// out[(i / NR) * ldo + i % NR] += lane sum of acc[i], for the TR * NR accumulators of a register tile.
template <int TR, int NR>
[[gnu::always_inline]] inline void add_hsums(const __m256 (&acc)[TR * NR], float* out, int64_t ldo) {
    constexpr int M = TR * NR;
#pragma GCC unroll 16
    for (int i = 0; i < M; i += 4) {
        const __m256 a = acc[i];
        const __m256 b = acc[i + 1 < M ? i + 1 : M - 1];
        const __m256 c = acc[i + 2 < M ? i + 2 : M - 1];
        const __m256 d = acc[i + 3 < M ? i + 3 : M - 1];
        alignas(16) float s[4];
        _mm_store_ps(s, hsum4(a, b, c, d));
        for (int j = 0; j < 4 && i + j < M; ++j) out[(i + j) / NR * ldo + (i + j) % NR] += s[j];
    }
}

// For TR token rows of x (stride ldx) and NR weight rows (stride ldw), adds one block's sum over `len`
// (<= kBlock) columns to out[t * ldo + r]. With kPrefetch, also prefetches the bytes from `pf` on at the rate
// the NR rows are consumed (NR * sizeof(Elem) bytes per column).
template <int TR, int NR, class W, bool kPrefetch = false>
[[gnu::always_inline]] inline void dot_block(const float* x, int64_t ldx, const typename W::Elem* w, int64_t ldw,
                                             int64_t len, float* out, int64_t ldo, const char* pf = nullptr) {
    constexpr int H = W::kHalves;
    constexpr int64_t kChunk = 8 * H;
    constexpr int64_t kStep = NR * static_cast<int64_t>(sizeof(typename W::Elem));
    __m256 acc[TR * NR];
#pragma GCC unroll 32
    for (int i = 0; i < TR * NR; ++i) acc[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + kChunk <= len; k += kChunk) {
        if constexpr (kPrefetch) {
#pragma GCC unroll 8
            for (int64_t l = 0; l < kChunk * kStep; l += 64) _mm_prefetch(pf + k * kStep + l, _MM_HINT_T0);
        }
        // Hold the smaller of the two operand sets in registers; the other is streamed one vector at a time.
        if constexpr (TR < NR) {
            __m256 xv[TR][H];
#pragma GCC unroll 16
            for (int t = 0; t < TR; ++t)
#pragma GCC unroll 2
                for (int h = 0; h < H; ++h) xv[t][h] = _mm256_loadu_ps(x + t * ldx + k + 8 * h);
#pragma GCC unroll 16
            for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 2
                for (int h = 0; h < H; ++h) {
                    const __m256 wv = W::load(w + r * ldw + k, h);
#pragma GCC unroll 16
                    for (int t = 0; t < TR; ++t) acc[t * NR + r] = _mm256_fmadd_ps(xv[t][h], wv, acc[t * NR + r]);
                }
            }
        } else {
            __m256 wv[NR][H];
#pragma GCC unroll 16
            for (int r = 0; r < NR; ++r)
#pragma GCC unroll 2
                for (int h = 0; h < H; ++h) wv[r][h] = W::load(w + r * ldw + k, h);
#pragma GCC unroll 16
            for (int t = 0; t < TR; ++t) {
#pragma GCC unroll 2
                for (int h = 0; h < H; ++h) {
                    const __m256 xv = _mm256_loadu_ps(x + t * ldx + k + 8 * h);
#pragma GCC unroll 16
                    for (int r = 0; r < NR; ++r) acc[t * NR + r] = _mm256_fmadd_ps(xv, wv[r][h], acc[t * NR + r]);
                }
            }
        }
    }
    if (k < len) {
        const int64_t rem = len - k;
        const __m256i mask = lane_mask(rem);
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) {
            __m256 wv[NR];
#pragma GCC unroll 16
            for (int r = 0; r < NR; ++r) wv[r] = W::load_part(w + r * ldw + k, rem, h);
#pragma GCC unroll 16
            for (int t = 0; t < TR; ++t) {
                // Permuted x is zero padded to whole chunks; plain x is masked to the rem valid columns.
                const __m256 xv = W::kPermuted ? _mm256_loadu_ps(x + t * ldx + k + 8 * h)
                                               : _mm256_maskload_ps(x + t * ldx + k, mask);
#pragma GCC unroll 16
                for (int r = 0; r < NR; ++r) acc[t * NR + r] = _mm256_fmadd_ps(xv, wv[r], acc[t * NR + r]);
            }
        }
    }
    add_hsums<TR, NR>(acc, out, ldo);
}

// Up to TR tokens (tr of them) against NR weight rows; see dot_block.
template <int TR, int NR, class W, bool kPrefetch = false>
void token_group(int64_t tr, const float* x, int64_t ldx, const typename W::Elem* w, int64_t ldw, int64_t len, float* y,
                 int64_t N, const char* pf = nullptr) {
    if constexpr (TR > 1) {
        if (tr < TR) return token_group<TR - 1, NR, W, kPrefetch>(tr, x, ldx, w, ldw, len, y, N, pf);
    }
    dot_block<TR, NR, W, kPrefetch>(x, ldx, w, ldw, len, y, N, pf);
}

// Small and medium T (decode, short prompts): the weights are read from memory once, NR rows at a time,
// and converted in registers; every group of TR tokens uses a block of those rows while it is in L1.
// Rows are short streams (2 KiB for K = 1024 bf16) that the hardware prefetchers pick up too late, so the
// next NR rows (contiguous after these) are prefetched linearly while the first token group runs: that
// lifts a 1-token matvec from ~60% to ~85% of read bandwidth.
template <int TR, int NR, class W>
void streamed_rows(const float* x, int64_t ldx, int64_t T, int64_t K, const typename W::Elem* w, float* y, int64_t N) {
    constexpr int64_t kEsize = sizeof(typename W::Elem);
    const char* next = reinterpret_cast<const char*>(w + NR * K);
    for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
        const int64_t len = min64(kBlock, K - k0);
        token_group<TR, NR, W, true>(min64(TR, T), x + k0, ldx, w + k0, K, len, y, N, next + k0 * NR * kEsize);
        for (int64_t t = TR; t < T; t += TR)
            token_group<TR, NR, W>(min64(TR, T - t), x + t * ldx + k0, ldx, w + k0, K, len, y + t * N, N);
    }
}

template <int TR, int NR, class W>
void matmul_streamed(const float* x, int64_t ldx, int64_t T, int64_t K, const typename W::Elem* w, float* y, int64_t N,
                     int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; n + NR <= n1; n += NR) streamed_rows<TR, NR, W>(x, ldx, T, K, w + n * K, y + n, N);
    for (; n < n1; ++n) streamed_rows<TR, 1, W>(x, ldx, T, K, w + n * K, y + n, N);
}

// TR tokens against `rows` rows of an f32 panel (stride ldp).
template <int TR>
void panel_tile(const float* x, int64_t ldx, const float* panel, int64_t ldp, int64_t rows, int64_t len, float* y,
                int64_t N) {
    int64_t n = 0;
    for (; n + 3 <= rows; n += 3) dot_block<TR, 3, F32W>(x, ldx, panel + n * ldp, ldp, len, y + n, N);
    if (rows - n == 2) dot_block<TR, 2, F32W>(x, ldx, panel + n * ldp, ldp, len, y + n, N);
    if (rows - n == 1) dot_block<TR, 1, F32W>(x, ldx, panel + n * ldp, ldp, len, y + n, N);
}

// Converts `rows` weight rows x `len` columns to f32 rows kPanelStride apart, in W's column order, the
// last chunk zero padded.
template <class W>
void pack_panel(const typename W::Elem* w, int64_t K, int64_t rows, int64_t len, float* panel) {
    constexpr int64_t kChunk = 8 * W::kHalves;
    for (int64_t r = 0; r < rows; ++r) {
        const typename W::Elem* src = w + r * K;
        float* dst = panel + r * kPanelStride;
        int64_t k = 0;
        for (; k + kChunk <= len; k += kChunk)
            for (int h = 0; h < W::kHalves; ++h) _mm256_store_ps(dst + k + 8 * h, W::load(src + k, h));
        if (k < len)
            for (int h = 0; h < W::kHalves; ++h) _mm256_store_ps(dst + k + 8 * h, W::load_part(src + k, len - k, h));
    }
}

// Large T (prefill): for each kTokenTile tokens, panels of kPanelRows weight rows x kBlock columns are
// converted to f32 once and stay in L2 while every 4-token group of the tile passes over them, each group
// in L1 for a whole panel; converting once per panel rather than once per group is what pays off here.
template <class W>
void matmul_blocked(const float* x, int64_t ldx, int64_t T, int64_t K, const typename W::Elem* w, float* y, int64_t N,
                    int64_t n0, int64_t n1, float* panel) {
    for (int64_t t0 = 0; t0 < T; t0 += kTokenTile) {
        const int64_t t1 = min64(T, t0 + kTokenTile);
        for (int64_t nb = n0; nb < n1; nb += kPanelRows) {
            const int64_t rows = min64(kPanelRows, n1 - nb);
            for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
                const int64_t len = min64(kBlock, K - k0);
                // A permuted panel is padded to whole chunks, and so is x.
                const int64_t plen = W::kPermuted ? round_up16(len) : len;
                pack_panel<W>(w + nb * K + k0, K, rows, len, panel);
                for (int64_t t = t0; t < t1; t += 4) {
                    const float* xt = x + t * ldx + k0;
                    float* yt = y + t * N + nb;
                    switch (min64(4, t1 - t)) {
                        case 4: panel_tile<4>(xt, ldx, panel, kPanelStride, rows, plen, yt, N); break;
                        case 3: panel_tile<3>(xt, ldx, panel, kPanelStride, rows, plen, yt, N); break;
                        case 2: panel_tile<2>(xt, ldx, panel, kPanelStride, rows, plen, yt, N); break;
                        default: panel_tile<1>(xt, ldx, panel, kPanelStride, rows, plen, yt, N); break;
                    }
                }
            }
        }
    }
}

// Every path accumulates block sums into y, so y starts at zero and the bias is added last.
template <class W>
void matmul_typed(const float* x, int64_t T, int64_t K, const void* wv, const float* bias, float* y, int64_t N,
                  int64_t n0, int64_t n1) {
    const auto* w = static_cast<const typename W::Elem*>(wv);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t n = n0; n < n1; ++n) y[t * N + n] = 0.0f;
    const bool blocked = T > kStreamedMaxT;
    // This thread's scratch memory holds the permuted x (bf16 weights) and the f32 panel (prefill).
    const int64_t ldx = W::kPermuted ? round_up16(K) : K;
    const size_t x_bytes = W::kPermuted ? static_cast<size_t>(T * ldx) * sizeof(float) : 0;
    const size_t panel_bytes = blocked ? kPanelRows * kPanelStride * sizeof(float) : 0;
    auto* scratch = x_bytes + panel_bytes > 0 ? static_cast<char*>(detail::scratch(x_bytes + panel_bytes)) : nullptr;
    if constexpr (W::kPermuted) x = permute_chunks(x, T, K, ldx, reinterpret_cast<float*>(scratch));
    // Register tiles: accumulators, held operands and a temporary within 16 YMM registers (bf16 holds two
    // halves of each operand, hence the narrower tiles).
    if (blocked) {
        matmul_blocked<W>(x, ldx, T, K, w, y, N, n0, n1, reinterpret_cast<float*>(scratch + x_bytes));
    } else if constexpr (W::kPermuted) {
        switch (T) {
            case 1: matmul_streamed<1, 8, W>(x, ldx, T, K, w, y, N, n0, n1); break;
            case 2: matmul_streamed<2, 4, W>(x, ldx, T, K, w, y, N, n0, n1); break;
            case 3: matmul_streamed<3, 2, W>(x, ldx, T, K, w, y, N, n0, n1); break;
            default: matmul_streamed<4, 2, W>(x, ldx, T, K, w, y, N, n0, n1); break;
        }
    } else {
        switch (T) {
            case 1: matmul_streamed<1, 8, W>(x, ldx, T, K, w, y, N, n0, n1); break;
            case 2: matmul_streamed<2, 6, W>(x, ldx, T, K, w, y, N, n0, n1); break;
            case 3: matmul_streamed<3, 4, W>(x, ldx, T, K, w, y, N, n0, n1); break;
            default: matmul_streamed<4, 3, W>(x, ldx, T, K, w, y, N, n0, n1); break;
        }
    }
    if (bias != nullptr)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = n0; n < n1; ++n) y[t * N + n] += bias[n];
}

void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            int64_t n0, int64_t n1) {
    if (T <= 0 || n1 <= n0) return;
    switch (wt) {
        case DType::BF16: matmul_typed<BF16W>(x, T, K, w, bias, y, N, n0, n1); break;
        case DType::F16: matmul_typed<F16W>(x, T, K, w, bias, y, N, n0, n1); break;
        default: matmul_typed<F32W>(x, T, K, w, bias, y, N, n0, n1); break;
    }
}

void add(const float* a, const float* b, float* out, int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8)
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    if (i < i1) {
        const __m256i m = lane_mask(i1 - i);
        _mm256_maskstore_ps(out + i, m, _mm256_add_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m)));
    }
}

#include "backends/cpu/kernels/ggml_expf_avx2.inc"

// ggml_vec_swiglu_f32's 8-wide step: ggml_v_silu(g) * u, ggml_v_silu(g) = g / (1 + ggml_v_expf(0 - g)).
__m256 silu_mul8(__m256 g, __m256 u) {
    const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), ggml_v_expf(_mm256_sub_ps(_mm256_setzero_ps(), g)));
    return _mm256_mul_ps(_mm256_div_ps(g, den), u);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t n_vec) {
    int64_t i = 0;
    for (; i + 8 <= n_vec; i += 8)
        _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n_vec) {  // lanes are independent, so a partial group gives the same bits
        const __m256i m = lane_mask(n_vec - i);
        _mm256_maskstore_ps(out + i, m, silu_mul8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)));
        i = n_vec;
    }
    for (; i < n; ++i) out[i] = gate[i] / (1.0f + ::expf(-gate[i])) * up[i];
}

float dot_f32(const float* a, const float* b, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    if (i < n) {
        const __m256i m = lane_mask(n - i);
        a0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), a0);
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i < n) {
        const __m256i m = lane_mask(n - i);
        _mm256_maskstore_ps(y + i, m, _mm256_fmadd_ps(av, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
    }
}

// x0' = fma(x0, c, -(x1 * s)), x1' = fma(x0, s, x1 * c) on 8 pairs.
void rotate8(__m256& x0, __m256& x1, __m256 c, __m256 s) {
    const __m256 y0 = _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s));
    x1 = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
    x0 = y0;
}

void rope_rotate(float* x, int64_t heads, int64_t head_dim, const float* cs) {
    const int64_t half = head_dim / 2;
    for (int64_t h = 0; h < heads; ++h) {
        float* v = x + h * head_dim;
        int64_t i = 0;
        for (; i + 8 <= half; i += 8) {
            __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
            rotate8(x0, x1, _mm256_loadu_ps(cs + i), _mm256_loadu_ps(cs + half + i));
            _mm256_storeu_ps(v + i, x0);
            _mm256_storeu_ps(v + half + i, x1);
        }
        if (i < half) {
            const __m256i m = lane_mask(half - i);
            __m256 x0 = _mm256_maskload_ps(v + i, m), x1 = _mm256_maskload_ps(v + half + i, m);
            rotate8(x0, x1, _mm256_maskload_ps(cs + i, m), _mm256_maskload_ps(cs + half + i, m));
            _mm256_maskstore_ps(v + i, m, x0);
            _mm256_maskstore_ps(v + half + i, m, x1);
        }
    }
}

// One weight row in column order (an embedding lookup); cvt turns 8 halfwords into 8 f32.
template <class Cvt>
void convert_row16(const uint16_t* src, int64_t cols, float* out, Cvt cvt) {
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8) _mm256_storeu_ps(out + i, cvt(load8x16(src + i)));
    if (i < cols) _mm256_maskstore_ps(out + i, lane_mask(cols - i), cvt(load8x16_part(src + i, cols - i)));
}

void row_to_f32(const void* src, DType dt, int64_t cols, float* out) {
    const auto* h = static_cast<const uint16_t*>(src);
    switch (dt) {
        case DType::BF16:
            convert_row16(h, cols, out, [](__m128i v) {
                return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
            });
            break;
        case DType::F16: convert_row16(h, cols, out, [](__m128i v) { return _mm256_cvtph_ps(v); }); break;
        default: std::memcpy(out, src, static_cast<size_t>(cols) * sizeof(float)); break;
    }
}

double read_sweep(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < bytes; ++i) s += p[i];
    return static_cast<double>(s);
}

}  // namespace
}  // namespace tracelm::cpu::avx2

namespace tracelm::cpu {

// Declared extern in kernels_internal.h, so this const keeps external linkage.
const KernelTable detail::avx2_kernels = {
    Isa::Avx2, avx2::matmul, avx2::add, avx2::silu_mul, avx2::dot_f32, avx2::axpy_f32, avx2::rope_rotate,
    avx2::row_to_f32, avx2::read_sweep, &detail::avx2_quant, &detail::avx2_f16_attention,
};

}  // namespace tracelm::cpu
