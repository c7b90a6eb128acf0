#include "backends/cpu/paged_attention.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/kernels.h"

namespace tracelm::cpu {

PagedAttentionItem::PagedAttentionItem(const PagedAttentionArgs& a, int64_t item)
    : a_(a), m_(-std::numeric_limits<float>::infinity()) {
    const int hd = a.head_dim;
    const int64_t t = item / a.heads;
    const int h = static_cast<int>(item % a.heads);
    q_ = a.q + t * a.heads * hd + static_cast<int64_t>(h) * hd;
    out_ = a.out + t * a.heads * hd + static_cast<int64_t>(h) * hd;
    kv_off_ = static_cast<int64_t>(h / (a.heads / a.kv_heads)) * hd;
    std::memset(acc_, 0, sizeof(float) * static_cast<size_t>(hd));

    // Which sequence this token belongs to (num_seqs is small; a scan beats a search).
    int s = 0;
    while (s < a.num_seqs && !(a.query_start[s] <= t && t < a.query_start[s + 1])) ++s;
    if (s == a.num_seqs) return;
    const int64_t q_len = a.query_start[s + 1] - a.query_start[s];
    const int64_t i = t - a.query_start[s];
    visible_ = static_cast<int64_t>(a.seq_lens[s]) - q_len + i + 1;
    // Never read past the block table row: keys beyond it were never reserved.
    const int64_t capacity = static_cast<int64_t>(a.max_blocks) * a.block_size;
    if (visible_ > capacity) visible_ = capacity;
    table_ = a.block_tables + static_cast<int64_t>(s) * a.max_blocks;
}

void PagedAttentionItem::attend(int64_t pos) {
    const int32_t block = table_[pos / a_.block_size];
    if (block < 0) return;
    const int64_t slot = static_cast<int64_t>(block) * a_.block_size + pos % a_.block_size;
    if (slot >= a_.num_slots) return;
    const int hd = a_.head_dim;
    const int64_t kv_stride = static_cast<int64_t>(a_.kv_heads) * hd;
    const float score = dot_f32(q_, a_.k_cache + slot * kv_stride + kv_off_, hd) * a_.scale;
    if (score > m_) {
        const float correction = std::exp(m_ - score);
        l_ *= correction;
        for (int d = 0; d < hd; ++d) acc_[d] *= correction;
        m_ = score;
    }
    const float p = std::exp(score - m_);
    l_ += p;
    axpy_f32(p, a_.v_cache + slot * kv_stride + kv_off_, acc_, hd);
}

void PagedAttentionItem::finish() {
    const float inv = l_ > 0.0f ? 1.0f / l_ : 0.0f;
    for (int d = 0; d < a_.head_dim; ++d) out_[d] = acc_[d] * inv;
}

void paged_attention_range(const PagedAttentionArgs& a, int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
        PagedAttentionItem it(a, item);
        for (int64_t pos = 0; pos < it.visible(); ++pos) it.attend(pos);
        it.finish();
    }
}

}  // namespace tracelm::cpu
