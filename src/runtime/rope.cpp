#include "runtime/rope.h"

#include <cmath>

namespace tracelm {

void rope_inv_freq(const RopeSpec& rope, int head_dim, float* inv_freq) {
    for (int i = 0; i < head_dim / 2; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
        const float plain = 1.0f / std::pow(rope.theta, exponent);
        // Unscaled models keep the plain value bit for bit.
        inv_freq[i] = rope.factors.empty() ? plain : plain / rope.factors[static_cast<size_t>(i)];
    }
}

float rope_theta_scale(float theta, int head_dim) { return std::pow(theta, -2.0f / static_cast<float>(head_dim)); }

}  // namespace tracelm
