// The f16 attention kernels (kernels.h, F16AttentionKernels) with AVX2+FMA+F16C: the intrinsics ggml-cpu's AVX2
// build runs, in its order (vec.h ggml_v_expf, vec.cpp ggml_vec_dot_f16 and ggml_vec_soft_max_f32, llamafile's
// sgemm.cpp tinyBLAS). Internal and self-contained, as kernels_internal.h requires.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/kernels/kernels_internal.h"

namespace tracelm::cpu::avx2_f16_attention {
namespace {

void to_f16(const float* x, uint16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) out[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

// ggml's elements [g, g + 8) of x, widened; interleaved: element 2i is x[i], 2i+1 is x[half + i].
__m256 load8(const uint16_t* x, int64_t g, int64_t half, bool interleaved) {
    if (!interleaved) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + g)));
    const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + g / 2));
    const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + half + g / 2));
    return _mm256_cvtph_ps(_mm_unpacklo_epi16(lo, hi));
}

float elem(const uint16_t* x, int64_t g, int64_t half, bool interleaved) {
    return _cvtsh_ss(interleaved ? x[(g & 1) * half + g / 2] : x[g]);
}

// tinyBLAS's hsum: t = hi + lo, then (t0 + t2) + (t1 + t3).
float hsum_tinyblas(__m256 v) {
    __m128 t = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

template <F16Dot kOrder, bool kInterleaved>
float dot(const uint16_t* x, const uint16_t* y, int64_t n) {
    const int64_t half = n / 2;
    constexpr bool interleaved = kInterleaved;
    if constexpr (kOrder == F16Dot::Tinyblas) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < n; i += 8)
            acc = _mm256_fmadd_ps(load8(x, i, half, interleaved),
                                  _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i))), acc);
        return hsum_tinyblas(acc);
    }
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const int64_t np = n & ~int64_t{31};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; ++j)
            acc[j] = _mm256_fmadd_ps(
                load8(x, i + 8 * j, half, interleaved),
                _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i + 8 * j))), acc[j]);
    // GGML_F32x8_REDUCE.
    acc[0] = _mm256_add_ps(acc[0], acc[2]);
    acc[1] = _mm256_add_ps(acc[1], acc[3]);
    acc[0] = _mm256_add_ps(acc[0], acc[1]);
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(acc[0]), _mm256_extractf128_ps(acc[0], 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    double sum = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    for (int64_t i = np; i < n; ++i) sum += static_cast<double>(elem(x, i, half, interleaved) * _cvtsh_ss(y[i]));
    return static_cast<float>(sum);
}

#include "backends/cpu/kernels/ggml_expf_avx2.inc"

void soft_max(float* p, int64_t n, float scale) {
    const int64_t n8 = (n + 7) / 8 * 8;
    // ggml takes the max in index order; in another order only the sign of a zero max can differ, and
    // ggml_v_expf(w - max) is the same for both. _mm256_max_ps skips a NaN w as the scalar compare does.
    __m256 maxv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 w = _mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_set1_ps(scale));  // ggml_vec_scale_f32
        _mm256_storeu_ps(p + j, w);
        maxv = _mm256_max_ps(w, maxv);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, maxv);
    float max = lanes[0];
    for (int l = 1; l < 8; ++l) max = lanes[l] > max ? lanes[l] : max;
    for (; j < n; ++j) {
        p[j] *= scale;  // the mask adds 0 to the visible entries
        max = p[j] > max ? p[j] : max;
    }
    for (int64_t i = n; i < n8; ++i) p[i] = -std::numeric_limits<float>::infinity();
    double sum = 0.0;
    for (int64_t i = 0; i < n8; i += 8) {
        const __m256 val = ggml_v_expf(_mm256_sub_ps(_mm256_loadu_ps(p + i), _mm256_set1_ps(max)));
        _mm256_storeu_ps(p + i, val);
        __m128 v2 = _mm_add_ps(_mm256_extractf128_ps(val, 1), _mm256_castps256_ps128(val));
        v2 = _mm_add_ps(v2, _mm_movehl_ps(v2, v2));
        v2 = _mm_add_ss(v2, _mm_movehdup_ps(v2));
        sum += static_cast<double>(_mm_cvtss_f32(v2));
    }
    const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
    for (int64_t i = 0; i < n8; i += 8)
        _mm256_storeu_ps(p + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(p + i), inv),
                                                                _MM_FROUND_TO_NEAREST_INT)));
}

// A decode step reads each layer's cache rows once, long after the weights streamed in since the last step
// pushed them out of cache, and rows of one head are a cache line or two, 3-16 lines apart: too sparse for the
// hardware prefetchers. Without prefetching the rows this far ahead, attention waits on memory latency.
constexpr int64_t kRowsAhead = 8;

void prefetch_row(const uint16_t* base, const int64_t* rows, int64_t j, int64_t count, int64_t n) {
    if (j >= count || rows[j] < 0) return;
    const char* r = reinterpret_cast<const char*>(base + rows[j]);
    for (int64_t b = 0; b < n * 2; b += 64) _mm_prefetch(r + b, _MM_HINT_T0);
}

// The positions' loops live here, with the order and layout fixed at compile time.
template <F16Dot kOrder, bool kInterleaved>
void scores_as(const uint16_t* base, const int64_t* keys, int64_t count, const uint16_t* q, int64_t n, float* p) {
    for (int64_t j = 0; j < kRowsAhead; ++j) prefetch_row(base, keys, j, count, n);
    for (int64_t j = 0; j < count; ++j) {
        prefetch_row(base, keys, j + kRowsAhead, count, n);
        p[j] = keys[j] < 0 ? -std::numeric_limits<float>::infinity() : dot<kOrder, kInterleaved>(base + keys[j], q, n);
    }
}

void scores(const uint16_t* base, const int64_t* keys, int64_t count, const uint16_t* q, int64_t n, F16Dot order,
            bool interleaved, float* p) {
    if (order == F16Dot::Tinyblas)
        interleaved ? scores_as<F16Dot::Tinyblas, true>(base, keys, count, q, n, p)
                    : scores_as<F16Dot::Tinyblas, false>(base, keys, count, q, n, p);
    else
        interleaved ? scores_as<F16Dot::VecDot, true>(base, keys, count, q, n, p)
                    : scores_as<F16Dot::VecDot, false>(base, keys, count, q, n, p);
}

void fma_row(float p, const uint16_t* v, float* acc, int64_t n) {
    const __m256 pv = _mm256_set1_ps(p);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i))),
                                                  pv, _mm256_loadu_ps(acc + i)));
    for (; i < n; ++i) acc[i] = std::fma(_cvtsh_ss(v[i]), p, acc[i]);
}

void accumulate(const float* p, const uint16_t* base, const int64_t* values, int64_t count, int lanes, float* acc,
                int64_t n) {
    for (int64_t j = 0; j < kRowsAhead; ++j) prefetch_row(base, values, j, count, n);
    for (int64_t j = 0; j < count; ++j) {
        prefetch_row(base, values, j + kRowsAhead, count, n);
        if (values[j] >= 0) fma_row(p[j], base + values[j], acc + (j % lanes) * n, n);
    }
}

int64_t max_count(const int64_t* counts, int nq) {
    int64_t m = 0;
    for (int i = 0; i < nq; ++i) m = counts[i] > m ? counts[i] : m;
    return m;
}

// hsum_tinyblas of a[0..8), the same additions done for all eight at once: t = lo + hi of each, then
// (t0 + t2) + (t1 + t3).
__m256 hsum8_tinyblas(const __m256* a) {
    __m256 t[4];  // t[i]: the four t of a[2i], then those of a[2i + 1]
    for (int i = 0; i < 4; ++i)
        t[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
    // Per 128-bit half: t0 + t2 and t1 + t3 of two accumulators.
    const __m256 u0 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], 0x44), _mm256_shuffle_ps(t[0], t[1], 0xEE));
    const __m256 u1 = _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], 0x44), _mm256_shuffle_ps(t[2], t[3], 0xEE));
    // a[0], a[2], a[4], a[6] in the low half, a[1], a[3], a[5], a[7] in the high one.
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, 0x88), _mm256_shuffle_ps(u0, u1, 0xDD));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// dot<Tinyblas> of key row k with B queries at once, the key's elements widened once for all of them.
template <bool kInterleaved, int B>
void dots(const uint16_t* k, const float* q, int64_t n, float* out) {
    __m256 acc[B];
    for (int b = 0; b < B; ++b) acc[b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 kv = load8(k, i, n / 2, kInterleaved);
        for (int b = 0; b < B; ++b) acc[b] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q + b * n + i), acc[b]);
    }
    if constexpr (B == 8) {
        _mm256_storeu_ps(out, hsum8_tinyblas(acc));
    } else {
        for (int b = 0; b < B; ++b) out[b] = hsum_tinyblas(acc[b]);
    }
}

template <bool kInterleaved>
void scores_tile_as(const uint16_t* base, const int64_t* keys, const int64_t* counts, int nq, const float* q,
                    int64_t n, float* p, int64_t p_stride) {
    const int64_t count = max_count(counts, nq);
    for (int64_t j = 0; j < kRowsAhead; ++j) prefetch_row(base, keys, j, count, n);
    float s[kF16AttentionTile];
    for (int64_t j = 0; j < count; ++j) {
        prefetch_row(base, keys, j + kRowsAhead, count, n);
        if (keys[j] < 0) {
            for (int i = 0; i < nq; ++i) s[i] = -std::numeric_limits<float>::infinity();
        } else {
            // Eight independent accumulators hide the FMA latency of each dot's single chain.
            const uint16_t* k = base + keys[j];
            int i = 0;
            for (; i + 8 <= nq; i += 8) dots<kInterleaved, 8>(k, q + i * n, n, s + i);
            if ((nq - i) & 4) {
                dots<kInterleaved, 4>(k, q + i * n, n, s + i);
                i += 4;
            }
            if ((nq - i) & 2) {
                dots<kInterleaved, 2>(k, q + i * n, n, s + i);
                i += 2;
            }
            if ((nq - i) & 1) dots<kInterleaved, 1>(k, q + i * n, n, s + i);
        }
        for (int i = 0; i < nq; ++i)
            if (j < counts[i]) p[i * p_stride + j] = s[i];
    }
}

void scores_tile(const uint16_t* base, const int64_t* keys, const int64_t* counts, int nq, const float* q, int64_t n,
                 bool interleaved, float* p, int64_t p_stride) {
    interleaved ? scores_tile_as<true>(base, keys, counts, nq, q, n, p, p_stride)
                : scores_tile_as<false>(base, keys, counts, nq, q, n, p, p_stride);
}

// accumulate for B queries, lane by lane: the accumulators of one lane and 8 outputs of every query stay in
// registers while the positions of that lane go by, and each value element is widened once for all B queries.
template <int B>
void accumulate_block(const float* p, int64_t p_stride, const uint16_t* base, const int64_t* values,
                      const int64_t* counts, float* acc, int64_t n) {
    int64_t all = counts[0], any = counts[0];  // positions below `all` are seen by every query, below `any` by one
    for (int b = 1; b < B; ++b) {
        all = counts[b] < all ? counts[b] : all;
        any = counts[b] > any ? counts[b] : any;
    }
    for (int64_t l = 0; l < 8; ++l)
        for (int64_t d = 0; d < n; d += 8) {
            __m256 a[B];
            for (int b = 0; b < B; ++b) a[b] = _mm256_loadu_ps(acc + (b * 8 + l) * n + d);
            for (int64_t j = l; j < any; j += 8) {
                // A lane's rows lie 8 apart, too far for the hardware prefetchers.
                if (d == 0) prefetch_row(base, values, j + 8 * kRowsAhead, any, n);
                if (values[j] < 0) continue;
                const __m256 v =
                    _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + values[j] + d)));
                for (int b = 0; b < B; ++b)
                    if (j < all || j < counts[b])
                        a[b] = _mm256_fmadd_ps(v, _mm256_set1_ps(p[b * p_stride + j]), a[b]);
            }
            for (int b = 0; b < B; ++b) _mm256_storeu_ps(acc + (b * 8 + l) * n + d, a[b]);
        }
}

void accumulate_tile(const float* p, int64_t p_stride, const uint16_t* base, const int64_t* values,
                     const int64_t* counts, int nq, float* acc, int64_t n) {
    int i = 0;
    for (; i + 8 <= nq; i += 8)
        accumulate_block<8>(p + i * p_stride, p_stride, base, values, counts + i, acc + i * 8 * n, n);
    if ((nq - i) & 4) {
        accumulate_block<4>(p + i * p_stride, p_stride, base, values, counts + i, acc + i * 8 * n, n);
        i += 4;
    }
    if ((nq - i) & 2) {
        accumulate_block<2>(p + i * p_stride, p_stride, base, values, counts + i, acc + i * 8 * n, n);
        i += 2;
    }
    if ((nq - i) & 1) accumulate_block<1>(p + i * p_stride, p_stride, base, values, counts + i, acc + i * 8 * n, n);
}

}  // namespace
}  // namespace tracelm::cpu::avx2_f16_attention

namespace tracelm::cpu {

const F16AttentionKernels detail::avx2_f16_attention = {avx2_f16_attention::to_f16, avx2_f16_attention::scores,
                                                        avx2_f16_attention::soft_max, avx2_f16_attention::accumulate,
                                                        avx2_f16_attention::scores_tile,
                                                        avx2_f16_attention::accumulate_tile};

}  // namespace tracelm::cpu
