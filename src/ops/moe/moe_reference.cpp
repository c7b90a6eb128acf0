#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/moe/moe.h"

namespace tracelm::reference {

void moe_route_row(const float* logits, int64_t experts, int k, bool normalize, int32_t* ids, float* weights) {
    float m = -INFINITY;
    for (int64_t e = 0; e < experts; ++e) m = logits[e] > m ? logits[e] : m;
    std::vector<float> p(static_cast<size_t>(experts), 0.0f);
    if (m > -INFINITY && m < INFINITY) {
        double sum = 0.0;
        for (int64_t e = 0; e < experts; ++e) {
            p[static_cast<size_t>(e)] = std::isnan(logits[e]) ? 0.0f : std::exp(logits[e] - m);
            sum += static_cast<double>(p[static_cast<size_t>(e)]);
        }
        const auto inv = static_cast<float>(1.0 / sum);
        for (float& v : p) v *= inv;
    }
    std::vector<int32_t> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double sum = 0.0;
    for (int j = 0; j < k; ++j) {
        ids[j] = order[static_cast<size_t>(j)];
        weights[j] = p[static_cast<size_t>(ids[j])];
        sum += static_cast<double>(weights[j]);
    }
    if (!normalize || sum <= 0.0) return;
    const auto total = static_cast<float>(sum);
    for (int j = 0; j < k; ++j) weights[j] /= total;
}

}  // namespace tracelm::reference
