#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "ops/attention/attention.h"

namespace tracelm::reference {

void kv_write(std::span<const float> k, std::span<const float> v, std::span<const int32_t> slot_mapping, int64_t dim,
              std::span<float> k_cache, std::span<float> v_cache) {
    const int64_t slots = static_cast<int64_t>(k_cache.size()) / dim;
    for (size_t t = 0; t < slot_mapping.size(); ++t) {
        const int64_t slot = slot_mapping[t];
        if (slot < 0 || slot >= slots) continue;
        std::copy_n(k.begin() + static_cast<int64_t>(t) * dim, dim, k_cache.begin() + slot * dim);
        std::copy_n(v.begin() + static_cast<int64_t>(t) * dim, dim, v_cache.begin() + slot * dim);
    }
}

namespace {

// Causal paged attention in which query row t attends to the visible, assigned positions of selected(t, visible).
template <typename Select>
std::vector<double> paged_attention(std::span<const float> q, std::span<const float> k_cache,
                                    std::span<const float> v_cache, const PagedAttentionMeta& meta, int heads,
                                    int kv_heads, int head_dim, double scale, Select selected) {
    const size_t S = meta.seq_lens.size();
    const int64_t q_width = int64_t{heads} * head_dim, kv_width = int64_t{kv_heads} * head_dim;
    const int64_t slots = static_cast<int64_t>(k_cache.size()) / kv_width;
    if (meta.query_start_loc.size() != S + 1 || meta.block_tables.size() != S * meta.max_blocks ||
        heads % kv_heads != 0 || static_cast<int64_t>(q.size()) != meta.query_start_loc[S] * q_width)
        throw std::invalid_argument("reference::attention: shape mismatch");
    std::vector<double> out(q.size(), 0.0);
    for (size_t s = 0; s < S; ++s) {
        const int q0 = meta.query_start_loc[s], q_len = meta.query_start_loc[s + 1] - q0;
        for (int i = 0; i < q_len; ++i) {
            const int64_t t = q0 + i, visible = meta.seq_lens[s] - q_len + i + 1;
            std::vector<int64_t> seen;  // the slots query t attends to
            for (const int64_t j : selected(t, visible)) {
                if (j < 0 || j >= visible) continue;
                const int64_t b = j / meta.block_size;
                const int32_t block = b < meta.max_blocks ? meta.block_tables[s * meta.max_blocks + b] : -1;
                const int64_t slot = int64_t{block} * meta.block_size + j % meta.block_size;
                if (block >= 0 && slot < slots) seen.push_back(slot);
            }
            for (int h = 0; h < heads; ++h) {
                const int64_t kv_off = int64_t{h / (heads / kv_heads)} * head_dim;
                const float* qh = q.data() + t * q_width + int64_t{h} * head_dim;
                std::vector<double> p(seen.size());
                double mx = -INFINITY;
                for (size_t j = 0; j < seen.size(); ++j) {
                    double d = 0.0;
                    for (int e = 0; e < head_dim; ++e) d += double(qh[e]) * k_cache[seen[j] * kv_width + kv_off + e];
                    p[j] = d * scale;
                    mx = std::max(mx, p[j]);
                }
                double den = 0.0;
                for (double& x : p) den += (x = std::exp(x - mx));
                double* o = out.data() + t * q_width + int64_t{h} * head_dim;
                for (size_t j = 0; j < seen.size(); ++j)
                    for (int e = 0; e < head_dim; ++e) o[e] += p[j] / den * v_cache[seen[j] * kv_width + kv_off + e];
            }
        }
    }
    return out;
}

}  // namespace

std::vector<double> attention(std::span<const float> q, std::span<const float> k_cache, std::span<const float> v_cache,
                              const PagedAttentionMeta& meta, int heads, int kv_heads, int head_dim, double scale) {
    const int64_t window = meta.window;
    return paged_attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, scale, [window](int64_t, int64_t visible) {
        const int64_t start = window > 0 ? std::max<int64_t>(0, visible - window) : 0;
        std::vector<int64_t> all;
        for (int64_t j = start; j < visible; ++j) all.push_back(j);
        return all;
    });
}

std::vector<double> attention_over(std::span<const float> q, std::span<const float> k_cache,
                                   std::span<const float> v_cache, const PagedAttentionMeta& meta, int heads,
                                   int kv_heads, int head_dim, double scale,
                                   const std::vector<std::vector<int64_t>>& selected) {
    if (meta.query_start_loc.empty() || static_cast<int64_t>(selected.size()) != meta.query_start_loc.back())
        throw std::invalid_argument("reference::attention_over: one selection per query row");
    return paged_attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, scale,
                           [&](int64_t t, int64_t) { return selected[t]; });
}

}  // namespace tracelm::reference
