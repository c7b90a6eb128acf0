// mla_attention's double-precision reference: the expanded definition, a plain two-pass softmax per (row, head).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/mla/mla.h"

namespace tracelm::reference {

std::vector<double> mla_attention(std::span<const float> q_lat, std::span<const float> q_pe,
                                  std::span<const float> cache, const std::vector<int32_t>& block_tables,
                                  int max_blocks, const std::vector<int32_t>& seq_lens,
                                  const std::vector<int32_t>& query_start_loc, int block_size, int heads, int latent,
                                  int rope, double scale, const std::vector<std::vector<int64_t>>& selected) {
    const int64_t width = latent + rope, T = query_start_loc.back();
    std::vector<double> out(static_cast<size_t>(T * heads * latent), 0.0);
    // The slot of position p of sequence s, -1 without a block.
    const auto slot_of = [&](size_t s, int64_t p) -> int64_t {
        if (p / block_size >= max_blocks) return -1;
        const int32_t block = block_tables[s * static_cast<size_t>(max_blocks) + static_cast<size_t>(p / block_size)];
        return block < 0 ? -1 : static_cast<int64_t>(block) * block_size + p % block_size;
    };
    for (size_t s = 0; s + 1 < query_start_loc.size(); ++s) {
        const int64_t q_len = query_start_loc[s + 1] - query_start_loc[s];
        for (int64_t i = 0; i < q_len; ++i) {
            const int64_t t = query_start_loc[s] + i, visible = seq_lens[s] - q_len + i + 1;
            std::vector<int64_t> positions;
            for (int64_t p = 0; p < visible; ++p) {
                const bool picked = selected.empty() || std::ranges::find(selected[static_cast<size_t>(t)], p) !=
                                                            selected[static_cast<size_t>(t)].end();
                if (picked && slot_of(s, p) >= 0) positions.push_back(p);
            }
            for (int h = 0; h < heads; ++h) {
                std::vector<double> scores;
                for (const int64_t p : positions) {
                    const float* c = cache.data() + slot_of(s, p) * width;
                    double d = 0.0;
                    for (int k = 0; k < latent; ++k) d += static_cast<double>(q_lat[static_cast<size_t>((t * heads + h) * latent + k)]) * c[k];
                    for (int k = 0; k < rope; ++k) d += static_cast<double>(q_pe[static_cast<size_t>((t * heads + h) * rope + k)]) * c[latent + k];
                    scores.push_back(d * scale);
                }
                if (scores.empty()) continue;
                const double m = *std::ranges::max_element(scores);
                double sum = 0.0;
                for (double& x : scores) sum += (x = std::exp(x - m));
                for (size_t j = 0; j < positions.size(); ++j) {
                    const int64_t slot = slot_of(s, positions[j]);
                    for (int k = 0; k < latent; ++k)
                        out[static_cast<size_t>((t * heads + h) * latent + k)] += scores[j] / sum * cache[static_cast<size_t>(slot * width + k)];
                }
            }
        }
    }
    return out;
}

}  // namespace tracelm::reference
