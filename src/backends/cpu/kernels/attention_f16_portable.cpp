// The f16 attention kernels (kernels.h, F16AttentionKernels) in plain C++: each lane of ggml's AVX2 code as a scalar,
// with std::fma where it fuses, so that they give the AVX2 build's bits on any CPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/kernels_internal.h"
#include "ops/ggml_math.h"

namespace tracelm::cpu::portable_f16_attention {
namespace {

void to_f16(const float* x, uint16_t* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

// ggml's element g of x; interleaved: element 2i is x[i], 2i+1 is x[half + i].
float elem(const uint16_t* x, int64_t g, int64_t half, bool interleaved) {
    return f16_to_f32(interleaved ? x[(g & 1) * half + g / 2] : x[g]);
}

float dot(const uint16_t* x, const uint16_t* y, int64_t n, GgmlDot order, bool interleaved) {
    const int64_t half = n / 2;
    if (order == GgmlDot::Tinyblas) {
        float acc[8] = {};
        for (int64_t i = 0; i < n; i += 8)
            for (int l = 0; l < 8; ++l)
                acc[l] = std::fma(elem(x, i + l, half, interleaved), f16_to_f32(y[i + l]), acc[l]);
        const float t0 = acc[4] + acc[0], t1 = acc[5] + acc[1], t2 = acc[6] + acc[2], t3 = acc[7] + acc[3];
        return (t0 + t2) + (t1 + t3);
    }
    float acc[4][8] = {};
    const int64_t np = n & ~int64_t{31};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 8; ++l) {
                const int64_t g = i + 8 * j + l;
                acc[j][l] = std::fma(elem(x, g, half, interleaved), f16_to_f32(y[g]), acc[j][l]);
            }
    float s[8];
    for (int l = 0; l < 8; ++l) s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    const float t0 = s[0] + s[4], t1 = s[1] + s[5], t2 = s[2] + s[6], t3 = s[3] + s[7];
    double sum = (t0 + t1) + (t2 + t3);
    for (int64_t i = np; i < n; ++i) sum += static_cast<double>(elem(x, i, half, interleaved) * f16_to_f32(y[i]));
    return static_cast<float>(sum);
}

void soft_max(float* p, int64_t n, float scale) {
    const int64_t n8 = (n + 7) / 8 * 8;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) {
        p[i] *= scale;
        max = p[i] > max ? p[i] : max;
    }
    for (int64_t i = n; i < n8; ++i) p[i] = -std::numeric_limits<float>::infinity();
    double sum = 0.0;
    for (int64_t i = 0; i < n8; i += 8) {
        for (int l = 0; l < 8; ++l) p[i + l] = ggml::v_expf(p[i + l] - max);
        const float t0 = p[i + 4] + p[i], t1 = p[i + 5] + p[i + 1], t2 = p[i + 6] + p[i + 2], t3 = p[i + 7] + p[i + 3];
        sum += static_cast<double>((t0 + t2) + (t1 + t3));
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n8; ++i) p[i] = f16_to_f32(f32_to_f16(p[i] * inv));
}

void scores_one(const uint16_t* base, const int64_t* keys, int64_t count, const uint16_t* q, int64_t n, GgmlDot order,
                bool interleaved, float* p) {
    for (int64_t j = 0; j < count; ++j)
        p[j] = keys[j] < 0 ? -std::numeric_limits<float>::infinity() : dot(base + keys[j], q, n, order, interleaved);
}

void scores(const uint16_t* base, const int64_t* keys, int64_t count, const uint16_t* q, int nq, int64_t n,
            GgmlDot order, bool interleaved, float* p, int64_t p_stride) {
    for (int i = 0; i < nq; ++i) scores_one(base, keys, count, q + i * n, n, order, interleaved, p + i * p_stride);
}

void accumulate_one(const float* p, const uint16_t* base, const int64_t* values, int64_t count, int lanes, float* acc,
                    int64_t n) {
    for (int64_t j = 0; j < count; ++j) {
        if (values[j] < 0) continue;
        const uint16_t* v = base + values[j];
        float* a = acc + (j % lanes) * n;
        for (int64_t i = 0; i < n; ++i) a[i] = std::fma(f16_to_f32(v[i]), p[j], a[i]);
    }
}

void accumulate(const float* p, int64_t p_stride, int nq, const uint16_t* base, const int64_t* values, int64_t count,
                int lanes, float* acc, int64_t n) {
    for (int i = 0; i < nq; ++i) accumulate_one(p + i * p_stride, base, values, count, lanes, acc + i * lanes * n, n);
}

// The tiles query by query: these kernels load every row once per query anyway.
void attend_tile(const uint16_t* k_base, const uint16_t* v_base, const int64_t* offsets, const int64_t* counts,
                 const int64_t* starts, int nq, const float* q, int64_t n, bool interleaved, float scale, float* p,
                 int64_t, float* acc) {
    std::vector<uint16_t> q16(static_cast<size_t>(n));
    for (int i = 0; i < nq; ++i) {
        to_f16(q + i * n, q16.data(), n);
        scores_one(k_base, offsets, counts[i], q16.data(), n, GgmlDot::Tinyblas, interleaved, p);
        std::fill(p, p + starts[i], -std::numeric_limits<float>::infinity());
        soft_max(p, counts[i], scale);
        float* a = acc + i * 8 * n;
        std::fill(a, a + 8 * n, 0.0f);
        accumulate_one(p, v_base, offsets, counts[i], 8, a, n);
    }
}

}  // namespace
}  // namespace tracelm::cpu::portable_f16_attention

namespace tracelm::cpu {

const F16AttentionKernels detail::portable_f16_attention = {
    portable_f16_attention::to_f16, portable_f16_attention::scores, portable_f16_attention::soft_max, portable_f16_attention::accumulate,
    portable_f16_attention::attend_tile};

}  // namespace tracelm::cpu
