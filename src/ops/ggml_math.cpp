#include "ops/ggml_math.h"

#include <bit>
#include <cmath>

namespace tracelm::ggml {

float v_expf(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    const uint32_t e = std::bit_cast<uint32_t>(z) << 23;
    const float k = std::bit_cast<float>(e + std::bit_cast<uint32_t>(1.0f));
    const float u = b * b;
    const float j = std::fma(
        std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
        0x1.ffffecp-1f * b);
    if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);
    // Scaled in two factors where 2^n alone would leave the normal range (or overflow / underflow entirely).
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = std::bit_cast<float>(g + 0x7f000000u);
    if (std::fabs(n) > 192.0f) return s1 * s1;
    const float s2 = std::bit_cast<float>(e - g);
    return std::fma(s2, j, s2) * s1;
}

void soft_max_row(const float* x, float* p, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
    double total = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float e[8];
        for (int l = 0; l < 8; ++l) p[i + l] = e[l] = v_expf(x[i + l] - m);
        const float t0 = e[4] + e[0], t1 = e[5] + e[1], t2 = e[6] + e[2], t3 = e[7] + e[3];
        total += static_cast<double>((t0 + t2) + (t1 + t3));
    }
    for (; i < n; ++i) {
        p[i] = std::exp(x[i] - m);
        total += static_cast<double>(p[i]);
    }
    const auto inv = static_cast<float>(1.0 / total);
    for (int64_t j = 0; j < n; ++j) p[j] *= inv;
}

}  // namespace tracelm::ggml
