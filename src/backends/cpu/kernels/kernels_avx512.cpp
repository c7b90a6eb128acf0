// AVX-512 (F/BW/VL/DQ) kernels, compiled with those flags (and -mavx512bf16) and reached only through the
// dispatch table on CPUs that have them. Everything here is internal and self-contained (see
// kernels_internal.h for why).
//
// The float kernels are kernels_x86.inc at 16 lanes. matmul has two summation schemes, each the same on every
// code path:
//  - FMA (f32/f16 weights, and bf16 on CPUs without AVX512_BF16): kernels_x86.inc's order at L = 16: in each block
//    of 512 columns lane j of 16 collects x[k]*w[k] for k = j (mod 16) by fused multiply-add (partial last chunk
//    zero padded); lanes j and j+8 are added, then the 8 sums as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); block sums
//    are added in order to 0.0f; the bias comes last.
//  - AVX512_BF16 (bf16 weights, DotBF16): x is rounded to bf16 and each lane j collects, by vdpbf16ps over chunks
//    of 32, the pairs k = 2j, 2j+1 (mod 32); blocks, lane sums and bias as above.
#include "backends/cpu/kernels/immintrin_avx512.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kernels_internal.h"

namespace tracelm::cpu::avx512 {
namespace {

// Lanes [0, n) set.
__mmask16 mask16(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
__mmask32 mask32(int64_t n) { return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u); }

__m512 bf16x16_to_f32(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
__m256i load16x16(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
__m256i load16x16_part(const uint16_t* p, int64_t n) { return _mm256_maskz_loadu_epi16(mask16(n), p); }

// The vectors kernels_x86.inc is written over.
struct Simd {
    using F = __m512;
    using I = __m512i;
    static constexpr int64_t kLanes = 16;
    // Register tiles within 32 ZMM registers; f32 weights are read in place by the panel path.
    static constexpr std::array<int, 4> kRows = {8, 8, 6, 4};
    static constexpr int kPanelNR = 4;
    static constexpr bool kPackF32 = false;
    static F zero() { return _mm512_setzero_ps(); }
    static F set1(float a) { return _mm512_set1_ps(a); }
    static F load(const float* p) { return _mm512_loadu_ps(p); }
    static F load_part(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(mask16(n), p); }
    static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
    static void store_aligned(float* p, F v) { _mm512_store_ps(p, v); }
    static void store_part(float* p, int64_t n, F v) { _mm512_mask_storeu_ps(p, mask16(n), v); }
    static F add(F a, F b) { return _mm512_add_ps(a, b); }
    static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static __m256 fold8(F v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
    static F bf16(const uint16_t* p) { return bf16x16_to_f32(load16x16(p)); }
    static F bf16_part(const uint16_t* p, int64_t n) { return bf16x16_to_f32(load16x16_part(p, n)); }
    static F f16(const uint16_t* p) { return _mm512_cvtph_ps(load16x16(p)); }
    static F f16_part(const uint16_t* p, int64_t n) { return _mm512_cvtph_ps(load16x16_part(p, n)); }
    static I izero() { return _mm512_setzero_si512(); }
    static I iload(const void* p) { return _mm512_loadu_si512(p); }
    static I iadd64(I a, I b) { return _mm512_add_epi64(a, b); }
    static void istore(uint64_t* p, I v) { _mm512_store_si512(p, v); }
};

#include "backends/cpu/kernels/kernels_x86.inc"

// bf16 weights in column order, converted to f32 in registers (or to an f32 panel for large T).
struct BF16W : F16W {
    static F load_w(const uint16_t* p, int) { return Simd::bf16(p); }
    static F load_w_part(const uint16_t* p, int64_t n, int) { return Simd::bf16_part(p, n); }
};

// Rounds x to bf16 rows of ldx (K rounded up to 32) elements, zero padded, at out.
const uint16_t* activations_to_bf16(const float* x, int64_t T, int64_t K, int64_t ldx, uint16_t* out) {
    for (int64_t t = 0; t < T; ++t) {
        const float* src = x + t * K;
        uint16_t* dst = out + t * ldx;
        for (int64_t k = 0; k < ldx; k += 16) {
            const __m512 v =
                k + 16 <= K ? _mm512_loadu_ps(src + k) : _mm512_maskz_loadu_ps(mask16(K > k ? K - k : 0), src + k);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), (__m256i)_mm512_cvtneps_pbh(v));
        }
    }
    return out;
}

// bf16 weights against x rounded to bf16 (rows padded with zeros to a multiple of 32, so x chunks load whole),
// by AVX512_BF16's pair dot product; read in place by the panel path.
struct DotBF16 {
    using XElem = uint16_t;
    using WElem = uint16_t;
    using XV = __m512i;
    using WV = __m512i;
    static constexpr int kHalves = 1;
    static constexpr int64_t kChunk = 32;
    static constexpr bool kPadded = true;
    static constexpr bool kPack = false;
    static constexpr std::array<int, 4> kRows = Simd::kRows;
    static __m512i load_x(const uint16_t* p, int) { return _mm512_loadu_si512(p); }
    static __m512i load_x_part(const uint16_t* p, int64_t, int) { return _mm512_loadu_si512(p); }
    static __m512i load_w(const uint16_t* p, int) { return _mm512_loadu_si512(p); }
    static __m512i load_w_part(const uint16_t* p, int64_t n, int) { return _mm512_maskz_loadu_epi16(mask32(n), p); }
    static F madd(F acc, __m512i x, __m512i w) { return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w); }
    static const uint16_t* prepare_x(const float* x, int64_t T, int64_t K, int64_t ldx, uint16_t* out) {
        return activations_to_bf16(x, T, K, ldx, out);
    }
};

void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            int64_t n0, int64_t n1) {
    if (T <= 0 || n1 <= n0) return;
    switch (wt) {
        case DType::BF16:
            if (cpu_features().avx512_bf16)
                matmul_typed<DotBF16>(x, T, K, w, bias, y, N, n0, n1);
            else
                matmul_typed<BF16W>(x, T, K, w, bias, y, N, n0, n1);
            break;
        case DType::F16: matmul_typed<F16W>(x, T, K, w, bias, y, N, n0, n1); break;
        default: matmul_typed<F32W>(x, T, K, w, bias, y, N, n0, n1); break;
    }
}

// ggml's SwiGLU, GEGLU and RoPE rotation as its AVX2 build computes them: the AVX2 kernels' operations (ggml's own
// AVX-512 variants differ).
void silu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t n_vec) {
    detail::avx2_kernels.silu_mul(gate, up, out, n, n_vec);
}

void gelu_mul_f16(const float* table, const float* gate, const float* up, float* out, int64_t n) {
    detail::avx2_kernels.gelu_mul_f16(table, gate, up, out, n);
}

void rope_rotate(float* x, int64_t heads, int64_t head_dim, const float* cs) {
    detail::avx2_kernels.rope_rotate(x, heads, head_dim, cs);
}

}  // namespace
}  // namespace tracelm::cpu::avx512

namespace tracelm::cpu {

// Declared extern in kernels_internal.h, so this const keeps external linkage.
const KernelTable detail::avx512_kernels = {
    Isa::Avx512, avx512::matmul, avx512::add, avx512::silu_mul, avx512::gelu_mul_f16, avx512::dot_f32, avx512::matmul_f32_ggml, avx512::axpy_f32, avx512::rope_rotate,
    avx512::row_to_f32, avx512::read_sweep, &detail::avx512_quant,
    // ggml's attention numbers are those of its AVX2 build, which these kernels reproduce on wider vectors.
    &detail::avx512_f16_attention,
};

}  // namespace tracelm::cpu
