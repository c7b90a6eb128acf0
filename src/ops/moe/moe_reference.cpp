#include <algorithm>
#include <cmath>
#include <functional>
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


void moe_route_grouped_row(const float* logits, const float* bias, int64_t experts, int n_group, int topk_group, int k,
                           bool normalize, double scaling, int32_t* ids, float* weights) {
    const int64_t per = experts / n_group;
    std::vector<double> s(static_cast<size_t>(experts)), c(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) {
        s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
        c[e] = std::isnan(s[e] + bias[e]) ? -INFINITY : s[e] + bias[e];
    }
    std::vector<double> group(static_cast<size_t>(n_group));
    for (int g = 0; g < n_group; ++g) {
        std::vector<double> members(c.begin() + g * per, c.begin() + (g + 1) * per);
        std::sort(members.begin(), members.end(), std::greater<>());
        group[g] = std::isnan(members[0] + members[1]) ? -INFINITY : members[0] + members[1];
    }
    // The groups by (score descending, index ascending): a stable sort of ascending indices.
    std::vector<int32_t> groups(static_cast<size_t>(n_group));
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(), [&](int32_t a, int32_t b) { return group[a] > group[b]; });
    std::vector<bool> allowed(static_cast<size_t>(experts), false);
    for (int j = 0; j < topk_group; ++j)
        for (int64_t e = groups[j] * per; e < (groups[j] + 1) * per; ++e) allowed[e] = true;
    std::vector<int32_t> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    // Dropped experts after every kept one (a kept expert may score -inf itself).
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        if (allowed[a] != allowed[b]) return static_cast<bool>(allowed[a]);
        return c[a] > c[b];
    });
    double sum = 0.0;
    for (int j = 0; j < k; ++j) {
        ids[j] = order[static_cast<size_t>(j)];
        sum += s[ids[j]];
    }
    for (int j = 0; j < k; ++j)
        weights[j] = static_cast<float>((normalize ? s[ids[j]] / (sum + 1e-20) : s[ids[j]]) * scaling);
}

}  // namespace tracelm::reference
