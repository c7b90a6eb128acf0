#include <algorithm>
#include <stdexcept>

#include "ops/dsa/dsa_indexer.h"

namespace tracelm::reference {

std::vector<double> dsa_indexer(std::span<const float> q, std::span<const float> weights, std::span<const float> keys,
                                int heads, int64_t D) {
    const int64_t width = heads * D;
    if (heads <= 0 || D <= 0 || q.size() % width != 0 || keys.size() % D != 0 ||
        weights.size() != q.size() / width * heads)
        throw std::invalid_argument("reference::dsa_indexer: shape mismatch");
    const int64_t T = static_cast<int64_t>(q.size()) / width, nk = static_cast<int64_t>(keys.size()) / D;
    std::vector<double> scores(static_cast<size_t>(T * nk));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < nk; ++s) {
            double score = 0.0;
            for (int h = 0; h < heads; ++h) {
                double dot = 0.0;
                for (int64_t e = 0; e < D; ++e) dot += double(q[t * width + h * D + e]) * keys[s * D + e];
                score += weights[t * heads + h] * std::max(dot, 0.0);
            }
            scores[t * nk + s] = score;
        }
    return scores;
}

}  // namespace tracelm::reference
