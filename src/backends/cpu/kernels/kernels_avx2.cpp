// AVX2 + FMA + F16C kernels, compiled with those flags and reached only through the dispatch table on CPUs
// that have them. Everything here is internal and self-contained (see kernels_internal.h for why).
//
// The float kernels are kernels_x86.inc at 8 lanes: matmul sums lane j of 8 over k = j (mod 8) in each block
// of 512 columns, the 8 lanes as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), blocks in order (the order written out
// in kernels_x86.inc). For bf16 weights the same order applies to x and w with every chunk of 16 columns (the
// last one zero padded) permuted to its 8 even columns followed by its 8 odd ones: one 32-byte load then yields
// both halves as f32 with a shift and a mask, where converting 8 in order costs a widening shuffle, and at one
// thread per core the decode matvec is limited by those conversion uops, not by memory.
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kernels_internal.h"

namespace tracelm::cpu::avx2 {
namespace {

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

__m256 bf16x8_to_f32(__m128i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16)); }

// The vectors kernels_x86.inc is written over.
struct Simd {
    using F = __m256;
    using I = __m256i;
    static constexpr int64_t kLanes = 8;
    // Register tiles within 16 YMM registers (accumulators, held operands and a temporary).
    static constexpr std::array<int, 4> kRows = {8, 6, 4, 3};
    static constexpr int kPanelNR = 3;
    static constexpr bool kPackF32 = true;
    static F zero() { return _mm256_setzero_ps(); }
    static F set1(float a) { return _mm256_set1_ps(a); }
    static F load(const float* p) { return _mm256_loadu_ps(p); }
    static F load_part(const float* p, int64_t n) { return _mm256_maskload_ps(p, lane_mask(n)); }
    static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
    static void store_aligned(float* p, F v) { _mm256_store_ps(p, v); }
    static void store_part(float* p, int64_t n, F v) { _mm256_maskstore_ps(p, lane_mask(n), v); }
    static F add(F a, F b) { return _mm256_add_ps(a, b); }
    static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static __m256 fold8(F v) { return v; }
    static F bf16(const uint16_t* p) { return bf16x8_to_f32(load8x16(p)); }
    static F bf16_part(const uint16_t* p, int64_t n) { return bf16x8_to_f32(load8x16_part(p, n)); }
    static F f16(const uint16_t* p) { return _mm256_cvtph_ps(load8x16(p)); }
    static F f16_part(const uint16_t* p, int64_t n) { return _mm256_cvtph_ps(load8x16_part(p, n)); }
    static I izero() { return _mm256_setzero_si256(); }
    static I iload(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
    static I iadd64(I a, I b) { return _mm256_add_epi64(a, b); }
    static void istore(uint64_t* p, I v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
};

#include "backends/cpu/kernels/kernels_x86.inc"

// T rows of x (K columns) into rows of ldx = K rounded up to 16 columns, each chunk of 16 permuted to its even
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

// bf16 weights in chunks of 16 columns, half 0 the even columns (each 32-bit word's low halfword, shifted up),
// half 1 the odd ones; x comes permuted the same way and zero padded (permute_chunks). Holding two halves of
// each operand, the register tiles are narrower.
struct BF16W {
    using XElem = float;
    using WElem = uint16_t;
    using XV = F;
    using WV = F;
    static constexpr int kHalves = 2;
    static constexpr int64_t kChunk = 16;
    static constexpr bool kPadded = true;
    static constexpr bool kPack = true;
    static constexpr std::array<int, 4> kRows = {8, 4, 2, 2};
    static F half(__m256i v, int h) {
        return _mm256_castsi256_ps(h == 0 ? _mm256_slli_epi32(v, 16)
                                          : _mm256_and_si256(v, _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u))));
    }
    static F load_x(const float* p, int h) { return _mm256_loadu_ps(p + 8 * h); }
    static F load_x_part(const float* p, int64_t, int h) { return _mm256_loadu_ps(p + 8 * h); }
    static F load_w(const uint16_t* p, int h) { return half(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), h); }
    static F load_w_part(const uint16_t* p, int64_t n, int h) {
        alignas(32) uint16_t tmp[16] = {};
        for (int64_t i = 0; i < n; ++i) tmp[i] = p[i];
        return half(_mm256_load_si256(reinterpret_cast<const __m256i*>(tmp)), h);
    }
    static F madd(F acc, F x, F w) { return _mm256_fmadd_ps(x, w, acc); }
    static const float* prepare_x(const float* x, int64_t T, int64_t K, int64_t ldx, float* out) {
        return permute_chunks(x, T, K, ldx, out);
    }
};

void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            int64_t n0, int64_t n1) {
    if (T <= 0 || n1 <= n0) return;
    switch (wt) {
        case DType::BF16: matmul_typed<BF16W>(x, T, K, w, bias, y, N, n0, n1); break;
        case DType::F16: matmul_typed<F16W>(x, T, K, w, bias, y, N, n0, n1); break;
        default: matmul_typed<F32W>(x, T, K, w, bias, y, N, n0, n1); break;
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

// ggml_vec_geglu_f32 on 8 lanes: F16C rounds as f32_to_f16 does, so the gathered entries are the scalar loop's.
__m256 gelu_mul8(const float* table, __m256 g, __m256 u) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
    const __m256 y = _mm256_mul_ps(_mm256_i32gather_ps(table, h, 4), u);
    const __m256 hi = _mm256_cmp_ps(g, _mm256_set1_ps(10.0f), _CMP_GE_OQ);
    const __m256 lo = _mm256_cmp_ps(g, _mm256_set1_ps(-10.0f), _CMP_LE_OQ);
    return _mm256_andnot_ps(lo, _mm256_blendv_ps(y, _mm256_mul_ps(g, u), hi));
}

void gelu_mul_f16(const float* table, const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, gelu_mul8(table, _mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        const __m256i m = lane_mask(n - i);
        _mm256_maskstore_ps(out + i, m, gelu_mul8(table, _mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)));
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

}  // namespace
}  // namespace tracelm::cpu::avx2

namespace tracelm::cpu {

// Declared extern in kernels_internal.h, so this const keeps external linkage.
const KernelTable detail::avx2_kernels = {
    Isa::Avx2, avx2::matmul, avx2::add, avx2::silu_mul, avx2::gelu_mul_f16, avx2::dot_f32, avx2::matmul_f32_ggml, avx2::axpy_f32, avx2::rope_rotate,
    avx2::row_to_f32, avx2::read_sweep, &detail::avx2_quant, &detail::avx2_f16_attention,
};
// The same kernels but the quantized products' (quant_avxvnni.cpp).
const KernelTable detail::avxvnni_kernels = {
    Isa::AvxVnni, avx2::matmul, avx2::add, avx2::silu_mul, avx2::gelu_mul_f16, avx2::dot_f32, avx2::matmul_f32_ggml, avx2::axpy_f32, avx2::rope_rotate,
    avx2::row_to_f32, avx2::read_sweep, &detail::avxvnni_quant, &detail::avx2_f16_attention,
};

}  // namespace tracelm::cpu
