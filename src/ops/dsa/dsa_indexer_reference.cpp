#include <algorithm>
#include <cmath>
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

std::vector<double> dsa_indexer_paged(std::span<const float> q, std::span<const float> weights,
                                      std::span<const float> key_cache, const PagedAttentionMeta& meta, int heads,
                                      int64_t D, int64_t max_keys) {
    const int64_t width = heads * D, S = static_cast<int64_t>(meta.seq_lens.size());
    if (heads <= 0 || D <= 0 || q.size() % width != 0 || key_cache.size() % D != 0 ||
        weights.size() != q.size() / width * heads || meta.query_start_loc.size() != meta.seq_lens.size() + 1)
        throw std::invalid_argument("reference::dsa_indexer_paged: shape mismatch");
    const int64_t T = static_cast<int64_t>(q.size()) / width, slots = static_cast<int64_t>(key_cache.size()) / D;
    std::vector<double> scores(static_cast<size_t>(T * max_keys), NAN);
    for (int64_t s = 0; s < S; ++s) {
        const int64_t q0 = meta.query_start_loc[s], q_len = meta.query_start_loc[s + 1] - q0;
        for (int64_t i = 0; i < q_len; ++i) {
            const int64_t t = q0 + i;
            for (int64_t p = 0; p < std::min<int64_t>(meta.seq_lens[s] - q_len + i + 1, max_keys); ++p) {
                const int64_t b = p / meta.block_size;
                const int32_t block = b < meta.max_blocks ? meta.block_tables[s * meta.max_blocks + b] : -1;
                const int64_t slot = static_cast<int64_t>(block) * meta.block_size + p % meta.block_size;
                if (block < 0 || slot >= slots) {
                    scores[t * max_keys + p] = -INFINITY;
                    continue;
                }
                double score = 0.0;
                for (int h = 0; h < heads; ++h) {
                    double dot = 0.0;
                    for (int64_t e = 0; e < D; ++e) dot += double(q[t * width + h * D + e]) * key_cache[slot * D + e];
                    score += weights[t * heads + h] * std::max(dot, 0.0);
                }
                scores[t * max_keys + p] = score;
            }
        }
    }
    return scores;
}

}  // namespace tracelm::reference
