// AVX-512 (F/BW/VL/DQ) kernels, compiled with those flags (and -mavx512bf16) and reached only through the
// dispatch table on CPUs that have them. Everything here is internal and self-contained (see
// kernels_internal.h for why).
//
// matmul has two summation schemes, each the same on every code path, which makes each output
// independent of the row range and batch size it was computed in:
//  - FMA (f32/f16 weights, and bf16 on CPUs without AVX512_BF16): K is cut into blocks of kBlock; within
//    a block, lane j of a 16-wide f32 accumulator collects x[k]*w[k] for k = j (mod 16) in increasing k by
//    fused multiply-add (partial last chunk zero padded); lanes j and j+8 are added, then the 8 sums as
//    ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); block sums are added in order to 0.0f; the bias comes last.
//  - AVX512_BF16 (bf16 weights): x is rounded to bf16 and each lane j collects, by vdpbf16ps over chunks of
//    32, the pairs k = 2j, 2j+1 (mod 32); blocks, lane sums and bias as above.
// GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized on their own _mm512_undefined_*() (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/kernels_internal.h"

namespace tracelm::cpu::avx512 {
namespace {

constexpr int64_t kBlock = 512;  // a multiple of both chunk widths (16 floats, 32 bf16)
// Up to this many tokens the weights are streamed (and converted in registers for every 4-token group);
// beyond it they are tiled into panels (the AVX2 kernels' measured crossover).
constexpr int64_t kStreamedMaxT = 48;
// Prefill tiling: kPanelRows weight rows x kBlock columns are reused from L2 for up to kTokenTile tokens.
constexpr int64_t kPanelRows = 48;
constexpr int64_t kTokenTile = 128;
// Panel rows are one cache line longer than kBlock so that they do not all map to the same L1 sets.
constexpr int64_t kPanelStride = kBlock + 16;

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Lanes [0, n) set.
__mmask16 mask16(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
__mmask32 mask32(int64_t n) { return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u); }

__m512 bf16x16_to_f32(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
__m256i load16x16(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Lane sums of a, b, c, d in the order described at the top.
__m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const auto fold = [](__m512 v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); };
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(fold(a), fold(b)), _mm256_hadd_ps(fold(c), fold(d)));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

float hsum(__m512 a) { return _mm_cvtss_f32(hsum4(a, a, a, a)); }

// Matmul policies: what x and w hold in memory, how a chunk of each is loaded (load_*_part: the first n
// elements, rest zero) and how it is accumulated.
struct FmaF32 {
    using XElem = float;
    using WElem = float;
    static constexpr int64_t kChunk = 16;
    static constexpr bool kPack = false;  // panels are used in place
    static __m512 load_x(const float* p) { return _mm512_loadu_ps(p); }
    static __m512 load_x_part(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(mask16(n), p); }
    static __m512 load_w(const float* p) { return _mm512_loadu_ps(p); }
    static __m512 load_w_part(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(mask16(n), p); }
    static __m512 madd(__m512 acc, __m512 x, __m512 w) { return _mm512_fmadd_ps(x, w, acc); }
};
struct FmaBF16 : FmaF32 {
    using WElem = uint16_t;
    static constexpr bool kPack = true;  // converted to an f32 panel for large T
    static __m512 load_w(const uint16_t* p) { return bf16x16_to_f32(load16x16(p)); }
    static __m512 load_w_part(const uint16_t* p, int64_t n) {
        return bf16x16_to_f32(_mm256_maskz_loadu_epi16(mask16(n), p));
    }
};
struct FmaF16 : FmaF32 {
    using WElem = uint16_t;
    static constexpr bool kPack = true;
    static __m512 load_w(const uint16_t* p) { return _mm512_cvtph_ps(load16x16(p)); }
    static __m512 load_w_part(const uint16_t* p, int64_t n) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask16(n), p));
    }
};
// x has been rounded to bf16 into rows padded with zeros to a multiple of 32, so x chunks load whole.
struct DotBF16 {
    using XElem = uint16_t;
    using WElem = uint16_t;
    static constexpr int64_t kChunk = 32;
    static constexpr bool kPack = false;
    static __m512i load_x(const uint16_t* p) { return _mm512_loadu_si512(p); }
    static __m512i load_x_part(const uint16_t* p, int64_t) { return _mm512_loadu_si512(p); }
    static __m512i load_w(const uint16_t* p) { return _mm512_loadu_si512(p); }
    static __m512i load_w_part(const uint16_t* p, int64_t n) { return _mm512_maskz_loadu_epi16(mask32(n), p); }
    static __m512 madd(__m512 acc, __m512i x, __m512i w) { return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w); }
};

// out[(i / NR) * ldo + i % NR] += lane sum of acc[i], for the TR * NR accumulators of a register tile.
template <int TR, int NR>
[[gnu::always_inline]] inline void add_hsums(const __m512 (&acc)[TR * NR], float* out, int64_t ldo) {
    constexpr int M = TR * NR;
#pragma GCC unroll 16
    for (int i = 0; i < M; i += 4) {
        const __m512 a = acc[i];
        const __m512 b = acc[i + 1 < M ? i + 1 : M - 1];
        const __m512 c = acc[i + 2 < M ? i + 2 : M - 1];
        const __m512 d = acc[i + 3 < M ? i + 3 : M - 1];
        alignas(16) float s[4];
        _mm_store_ps(s, hsum4(a, b, c, d));
        for (int j = 0; j < 4 && i + j < M; ++j) out[(i + j) / NR * ldo + (i + j) % NR] += s[j];
    }
}

// For TR token rows of x (stride ldx) and NR weight rows (stride ldw), adds one block's sum over `len`
// (<= kBlock) columns to out[t * ldo + r]. With kPrefetch, also prefetches the bytes from `pf` on at the rate
// the NR rows are consumed (NR * sizeof(WElem) bytes per column).
template <int TR, int NR, class P, bool kPrefetch = false>
[[gnu::always_inline]] inline void dot_block(const typename P::XElem* x, int64_t ldx, const typename P::WElem* w,
                                             int64_t ldw, int64_t len, float* out, int64_t ldo,
                                             const char* pf = nullptr) {
    constexpr int64_t kStep = NR * static_cast<int64_t>(sizeof(typename P::WElem));
    __m512 acc[TR * NR];
#pragma GCC unroll 32
    for (int i = 0; i < TR * NR; ++i) acc[i] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + P::kChunk <= len; k += P::kChunk) {
        if constexpr (kPrefetch) {
#pragma GCC unroll 16
            for (int64_t l = 0; l < P::kChunk * kStep; l += 64) _mm_prefetch(pf + k * kStep + l, _MM_HINT_T0);
        }
        decltype(P::load_w(w)) wv[NR];
#pragma GCC unroll 16
        for (int r = 0; r < NR; ++r) wv[r] = P::load_w(w + r * ldw + k);
#pragma GCC unroll 16
        for (int t = 0; t < TR; ++t) {
            const auto xv = P::load_x(x + t * ldx + k);
#pragma GCC unroll 16
            for (int r = 0; r < NR; ++r) acc[t * NR + r] = P::madd(acc[t * NR + r], xv, wv[r]);
        }
    }
    if (k < len) {
        const int64_t rem = len - k;
        decltype(P::load_w(w)) wv[NR];
#pragma GCC unroll 16
        for (int r = 0; r < NR; ++r) wv[r] = P::load_w_part(w + r * ldw + k, rem);
#pragma GCC unroll 16
        for (int t = 0; t < TR; ++t) {
            const auto xv = P::load_x_part(x + t * ldx + k, rem);
#pragma GCC unroll 16
            for (int r = 0; r < NR; ++r) acc[t * NR + r] = P::madd(acc[t * NR + r], xv, wv[r]);
        }
    }
    add_hsums<TR, NR>(acc, out, ldo);
}

// Up to TR tokens (tr of them) against NR weight rows; see dot_block.
template <int TR, int NR, class P, bool kPrefetch = false>
void token_group(int64_t tr, const typename P::XElem* x, int64_t ldx, const typename P::WElem* w, int64_t ldw,
                 int64_t len, float* y, int64_t N, const char* pf = nullptr) {
    if constexpr (TR > 1) {
        if (tr < TR) return token_group<TR - 1, NR, P, kPrefetch>(tr, x, ldx, w, ldw, len, y, N, pf);
    }
    dot_block<TR, NR, P, kPrefetch>(x, ldx, w, ldw, len, y, N, pf);
}

// Small and medium T: the weights are read from memory once, NR rows at a time, and every group of TR
// tokens uses a block of those rows while it is in L1. The next NR rows are prefetched linearly while
// the first token group runs, since short row streams defeat the hardware prefetchers (as in the AVX2
// kernels).
template <int TR, int NR, class P>
void streamed_rows(const typename P::XElem* x, int64_t ldx, int64_t T, int64_t K, const typename P::WElem* w, float* y,
                   int64_t N) {
    constexpr int64_t kEsize = sizeof(typename P::WElem);
    const char* next = reinterpret_cast<const char*>(w + NR * K);
    for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
        const int64_t len = min64(kBlock, K - k0);
        token_group<TR, NR, P, true>(min64(TR, T), x + k0, ldx, w + k0, K, len, y, N, next + k0 * NR * kEsize);
        for (int64_t t = TR; t < T; t += TR)
            token_group<TR, NR, P>(min64(TR, T - t), x + t * ldx + k0, ldx, w + k0, K, len, y + t * N, N);
    }
}

template <int TR, int NR, class P>
void matmul_streamed(const typename P::XElem* x, int64_t ldx, int64_t T, int64_t K, const typename P::WElem* w,
                     float* y, int64_t N, int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; n + NR <= n1; n += NR) streamed_rows<TR, NR, P>(x, ldx, T, K, w + n * K, y + n, N);
    for (; n < n1; ++n) streamed_rows<TR, 1, P>(x, ldx, T, K, w + n * K, y + n, N);
}

// TR tokens against `rows` weight rows (stride ldp) in 4x4 register tiles.
template <int TR, class P>
void panel_tile(const typename P::XElem* x, int64_t ldx, const typename P::WElem* panel, int64_t ldp, int64_t rows,
                int64_t len, float* y, int64_t N) {
    int64_t n = 0;
    for (; n + 4 <= rows; n += 4) dot_block<TR, 4, P>(x, ldx, panel + n * ldp, ldp, len, y + n, N);
    switch (rows - n) {
        case 3: dot_block<TR, 3, P>(x, ldx, panel + n * ldp, ldp, len, y + n, N); break;
        case 2: dot_block<TR, 2, P>(x, ldx, panel + n * ldp, ldp, len, y + n, N); break;
        case 1: dot_block<TR, 1, P>(x, ldx, panel + n * ldp, ldp, len, y + n, N); break;
        default: break;
    }
}

// Tokens [t0, t1) against a panel, 4 at a time; each group stays in L1 for the whole panel.
template <class P>
void panel_tokens(const typename P::XElem* x, int64_t ldx, int64_t t0, int64_t t1, const typename P::WElem* panel,
                  int64_t ldp, int64_t rows, int64_t len, float* y, int64_t N) {
    for (int64_t t = t0; t < t1; t += 4) {
        const typename P::XElem* xt = x + t * ldx;
        float* yt = y + t * N;
        switch (min64(4, t1 - t)) {
            case 4: panel_tile<4, P>(xt, ldx, panel, ldp, rows, len, yt, N); break;
            case 3: panel_tile<3, P>(xt, ldx, panel, ldp, rows, len, yt, N); break;
            case 2: panel_tile<2, P>(xt, ldx, panel, ldp, rows, len, yt, N); break;
            default: panel_tile<1, P>(xt, ldx, panel, ldp, rows, len, yt, N); break;
        }
    }
}

// Converts `rows` weight rows x `len` columns to f32 rows kPanelStride apart.
template <class P>
void pack_panel(const typename P::WElem* w, int64_t K, int64_t rows, int64_t len, float* panel) {
    for (int64_t r = 0; r < rows; ++r) {
        const typename P::WElem* src = w + r * K;
        float* dst = panel + r * kPanelStride;
        int64_t k = 0;
        for (; k + 16 <= len; k += 16) _mm512_store_ps(dst + k, P::load_w(src + k));
        if (k < len) _mm512_store_ps(dst + k, P::load_w_part(src + k, len - k));
    }
}

// Large T (prefill): for each kTokenTile tokens, panels of kPanelRows weight rows x kBlock columns are
// reused from L2 by every 4-token group of the tile; weights needing conversion are converted to an f32
// panel once.
template <class P>
void matmul_blocked(const typename P::XElem* x, int64_t ldx, int64_t T, int64_t K, const typename P::WElem* w, float* y,
                    int64_t N, int64_t n0, int64_t n1) {
    float* packed =
        P::kPack ? static_cast<float*>(detail::scratch(kPanelRows * kPanelStride * sizeof(float))) : nullptr;
    for (int64_t t0 = 0; t0 < T; t0 += kTokenTile) {
        const int64_t t1 = min64(T, t0 + kTokenTile);
        for (int64_t nb = n0; nb < n1; nb += kPanelRows) {
            const int64_t rows = min64(kPanelRows, n1 - nb);
            for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
                const int64_t len = min64(kBlock, K - k0);
                if constexpr (P::kPack) {
                    pack_panel<P>(w + nb * K + k0, K, rows, len, packed);
                    panel_tokens<FmaF32>(x + k0, ldx, t0, t1, packed, kPanelStride, rows, len, y + nb, N);
                } else {
                    panel_tokens<P>(x + k0, ldx, t0, t1, w + nb * K + k0, K, rows, len, y + nb, N);
                }
            }
        }
    }
}

// y must be zero on entry; every path adds block sums into it.
template <class P>
void matmul_rows(const typename P::XElem* x, int64_t ldx, int64_t T, int64_t K, const void* wv, float* y, int64_t N,
                 int64_t n0, int64_t n1) {
    const auto* w = static_cast<const typename P::WElem*>(wv);
    switch (T) {
        case 1: matmul_streamed<1, 8, P>(x, ldx, T, K, w, y, N, n0, n1); break;
        case 2: matmul_streamed<2, 8, P>(x, ldx, T, K, w, y, N, n0, n1); break;
        case 3: matmul_streamed<3, 6, P>(x, ldx, T, K, w, y, N, n0, n1); break;
        default:
            if (T <= kStreamedMaxT)
                matmul_streamed<4, 4, P>(x, ldx, T, K, w, y, N, n0, n1);
            else
                matmul_blocked<P>(x, ldx, T, K, w, y, N, n0, n1);
            break;
    }
}

// Rounds x to bf16 rows of Kp (K rounded up to 32) elements, zero padded, in this thread's scratch memory
// (which the DotBF16 paths, never packing panels, leave alone for the rest of the call).
uint16_t* activations_to_bf16(const float* x, int64_t T, int64_t K, int64_t Kp) {
    auto* xb = static_cast<uint16_t*>(detail::scratch(static_cast<size_t>(T * Kp) * sizeof(uint16_t)));
    for (int64_t t = 0; t < T; ++t) {
        const float* src = x + t * K;
        uint16_t* dst = xb + t * Kp;
        for (int64_t k = 0; k < Kp; k += 16) {
            const __m512 v =
                k + 16 <= K ? _mm512_loadu_ps(src + k) : _mm512_maskz_loadu_ps(mask16(K > k ? K - k : 0), src + k);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), (__m256i)_mm512_cvtneps_pbh(v));
        }
    }
    return xb;
}

void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            int64_t n0, int64_t n1) {
    if (T <= 0 || n1 <= n0) return;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t n = n0; n < n1; ++n) y[t * N + n] = 0.0f;
    switch (wt) {
        case DType::BF16:
            if (cpu_features().avx512_bf16) {
                const int64_t Kp = (K + 31) / 32 * 32;
                matmul_rows<DotBF16>(activations_to_bf16(x, T, K, Kp), Kp, T, K, w, y, N, n0, n1);
            } else {
                matmul_rows<FmaBF16>(x, K, T, K, w, y, N, n0, n1);
            }
            break;
        case DType::F16: matmul_rows<FmaF16>(x, K, T, K, w, y, N, n0, n1); break;
        default: matmul_rows<FmaF32>(x, K, T, K, w, y, N, n0, n1); break;
    }
    if (bias != nullptr)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = n0; n < n1; ++n) y[t * N + n] += bias[n];
}

void add(const float* a, const float* b, float* out, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 m = mask16(min64(16, i1 - i));
        _mm512_mask_storeu_ps(out + i, m,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
    }
}

// ggml's SwiGLU and RoPE rotation as its AVX2 build computes them: the AVX2 kernels' operations (ggml's own
// AVX-512 variants differ).
void silu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t n_vec) {
    detail::avx2_kernels.silu_mul(gate, up, out, n, n_vec);
}

void rope_rotate(float* x, int64_t heads, int64_t head_dim, const float* cs) {
    detail::avx2_kernels.rope_rotate(x, heads, head_dim, cs);
}

float dot_f32(const float* a, const float* b, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), a3);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = mask16(min64(16, n - i));
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a0);
    }
    return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    const __m512 av = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(min64(16, n - i));
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

template <class P>
void convert_row(const typename P::WElem* src, int64_t cols, float* out) {
    int64_t i = 0;
    for (; i + 16 <= cols; i += 16) _mm512_storeu_ps(out + i, P::load_w(src + i));
    if (i < cols) _mm512_mask_storeu_ps(out + i, mask16(cols - i), P::load_w_part(src + i, cols - i));
}

void row_to_f32(const void* src, DType dt, int64_t cols, float* out) {
    switch (dt) {
        case DType::BF16: convert_row<FmaBF16>(static_cast<const uint16_t*>(src), cols, out); break;
        case DType::F16: convert_row<FmaF16>(static_cast<const uint16_t*>(src), cols, out); break;
        default: convert_row<FmaF32>(static_cast<const float*>(src), cols, out); break;
    }
}

double read_sweep(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 256 <= bytes; i += 256) {
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 64));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 128));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 192));
    }
    alignas(64) uint64_t lanes[8];
    _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
    uint64_t s = 0;
    for (uint64_t v : lanes) s += v;
    for (; i < bytes; ++i) s += p[i];
    return static_cast<double>(s);
}

}  // namespace
}  // namespace tracelm::cpu::avx512

namespace tracelm::cpu {

// Declared extern in kernels_internal.h, so this const keeps external linkage.
const KernelTable detail::avx512_kernels = {
    Isa::Avx512, avx512::matmul, avx512::add, avx512::silu_mul, avx512::dot_f32, avx512::axpy_f32, avx512::rope_rotate,
    avx512::row_to_f32, avx512::read_sweep, &detail::avx512_quant,
    // ggml's attention numbers are those of its AVX2 build, which the AVX2 kernels reproduce.
    &detail::avx2_f16_attention,
};

}  // namespace tracelm::cpu
