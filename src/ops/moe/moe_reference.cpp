#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/ggml_math.h"
#include "ops/moe/moe.h"

namespace tracelm::reference {

void moe_route_row(const float* logits, int64_t experts, int k, bool normalize, int32_t* ids, float* weights) {
    std::vector<float> x(logits, logits + experts), p(static_cast<size_t>(experts), 0.0f);
    for (float& v : x) v = std::isnan(v) ? -INFINITY : v;
    const float m = *std::max_element(x.begin(), x.end());
    if (std::isfinite(m)) ggml::soft_max_row(x.data(), p.data(), experts);
    std::vector<int32_t> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double sum = 0.0;
    for (int j = 0; j < k; ++j) {
        ids[j] = order[static_cast<size_t>(j)];
        weights[j] = p[static_cast<size_t>(ids[j])];
        sum += static_cast<double>(weights[j]);
    }
    if (!normalize) return;
    const float total = std::max(static_cast<float>(sum), 0x1p-14f);
    for (int j = 0; j < k; ++j) weights[j] /= total;
}

}  // namespace tracelm::reference
