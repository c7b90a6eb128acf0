// AVX2 primitives of the fast dsa_topk kernel, compiled with -mavx2 and reached only through
// topk_cpu_range on CPUs that have it. Self-contained for the reason given in dsa_topk_cpu_internal.h: the
// scalar order_key of dsa_topk.h is restated here in vector form rather than called.
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/kernels/dsa_topk_internal.h"

namespace tracelm::dsa::avx2 {
namespace {

alignas(32) constexpr int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
// Lanes [0, n) set, 0 <= n <= 8.
__m256i lane_mask(int64_t n) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - n)); }

// Eight consecutive 32-bit values starting at p, of which only the first `len` (1..8) are read.
__m256i load8(const void* p, int64_t len) {
    return len == 8 ? _mm256_loadu_si256(static_cast<const __m256i*>(p))
                    : _mm256_maskload_epi32(static_cast<const int*>(p), lane_mask(len));
}

// Bit j set for each lane j whose 32-bit mask lane is set, limited to the first `len` lanes.
unsigned lanes(__m256i mask, int64_t len) {
    return static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(mask))) & ((1u << len) - 1u);
}

// order_key of eight floats given as their bits.
__m256i order_keys8(__m256i b) {
    const __m256i sign = _mm256_set1_epi32(INT32_MIN);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    b = _mm256_andnot_si256(_mm256_cmpeq_epi32(b, sign), b);
    const __m256i flip = _mm256_or_si256(_mm256_srai_epi32(b, 31), sign);
    return _mm256_andnot_si256(nan, _mm256_xor_si256(b, flip));
}

void order_keys(const float* x, int64_t n, uint32_t* keys) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(keys + i), order_keys8(load8(x + i, 8)));
    }
    if (i < n) {
        _mm256_maskstore_epi32(reinterpret_cast<int*>(keys + i), lane_mask(n - i), order_keys8(load8(x + i, n - i)));
    }
}

int64_t compact(const uint32_t* src, int64_t n, int shift, uint32_t prefix, uint32_t* dst) {
    const __m128i count = _mm_cvtsi32_si128(shift);
    const __m256i want = _mm256_set1_epi32(static_cast<int32_t>(prefix));
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t len = n - i < 8 ? n - i : 8;
        unsigned hit = lanes(_mm256_cmpeq_epi32(_mm256_srl_epi32(load8(src + i, len), count), want), len);
        for (; hit != 0; hit &= hit - 1) dst[kept++] = src[i + __builtin_ctz(hit)];
    }
    return kept;
}

void emit(const uint32_t* keys, int64_t n, uint32_t threshold, int64_t take_equal, int64_t total, int64_t base,
          int64_t* out) {
    // Unsigned comparison as signed comparison of values with the top bit flipped.
    const __m256i sign = _mm256_set1_epi32(INT32_MIN);
    const __m256i t = _mm256_set1_epi32(static_cast<int32_t>(threshold));
    const __m256i t_signed = _mm256_xor_si256(t, sign);
    int64_t written = 0;
    for (int64_t i = 0; i < n && written < total; i += 8) {
        const int64_t len = n - i < 8 ? n - i : 8;
        const __m256i k = load8(keys + i, len);
        const unsigned above = lanes(_mm256_cmpgt_epi32(_mm256_xor_si256(k, sign), t_signed), len);
        unsigned hit = above | (take_equal > 0 ? lanes(_mm256_cmpeq_epi32(k, t), len) : 0u);
        for (; hit != 0 && written < total; hit &= hit - 1) {
            const int j = __builtin_ctz(hit);
            if ((above >> j & 1u) == 0) {
                if (take_equal == 0) continue;
                --take_equal;
            }
            out[written++] = base + i + j;
        }
    }
}

}  // namespace
}  // namespace tracelm::dsa::avx2

namespace tracelm::dsa {
const detail::TopkPrimitives detail::avx2_topk = {avx2::order_keys, avx2::compact, avx2::emit};
}  // namespace tracelm::dsa
