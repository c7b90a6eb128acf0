#include "backends/cpu/paged_attention.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/kernels.h"

namespace tracelm::cpu {

void paged_attention_range(const PagedAttentionArgs& a, int64_t begin, int64_t end) {
    const int hd = a.head_dim;
    const int64_t q_stride = static_cast<int64_t>(a.heads) * hd;
    const int64_t kv_stride = static_cast<int64_t>(a.kv_heads) * hd;
    const int group = a.heads / a.kv_heads;
    float acc[kMaxHeadDim];

    for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / a.heads;
        const int h = static_cast<int>(item % a.heads);
        float* out = a.out + t * q_stride + static_cast<int64_t>(h) * hd;

        // Which sequence this token belongs to (num_seqs is small; a scan beats a search).
        int s = 0;
        while (s < a.num_seqs && !(a.query_start[s] <= t && t < a.query_start[s + 1])) ++s;
        if (s == a.num_seqs) {
            std::memset(out, 0, sizeof(float) * static_cast<size_t>(hd));
            continue;
        }
        const int64_t q_len = a.query_start[s + 1] - a.query_start[s];
        const int64_t i = t - a.query_start[s];
        int64_t visible = static_cast<int64_t>(a.seq_lens[s]) - q_len + i + 1;
        // Never read past the block table row: keys beyond it were never reserved.
        const int64_t capacity = static_cast<int64_t>(a.max_blocks) * a.block_size;
        if (visible > capacity) visible = capacity;

        const float* q = a.q + t * q_stride + static_cast<int64_t>(h) * hd;
        const int64_t kv_off = static_cast<int64_t>(h / group) * hd;
        const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks;

        // Online softmax in f32: running max m, running denominator l, accumulator acc.
        float m = -std::numeric_limits<float>::infinity();
        float l = 0.0f;
        std::memset(acc, 0, sizeof(float) * static_cast<size_t>(hd));
        for (int64_t j = 0; j < visible; ++j) {
            const int32_t block = table[j / a.block_size];
            if (block < 0) continue;
            const int64_t slot = static_cast<int64_t>(block) * a.block_size + j % a.block_size;
            if (slot >= a.num_slots) continue;
            const float score = dot_f32(q, a.k_cache + slot * kv_stride + kv_off, hd) * a.scale;
            const float* v = a.v_cache + slot * kv_stride + kv_off;
            if (score > m) {
                const float correction = std::exp(m - score);
                l *= correction;
                for (int d = 0; d < hd; ++d) acc[d] *= correction;
                m = score;
            }
            const float p = std::exp(score - m);
            l += p;
            axpy_f32(p, v, acc, hd);
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int d = 0; d < hd; ++d) out[d] = acc[d] * inv;
    }
}

}  // namespace tracelm::cpu
