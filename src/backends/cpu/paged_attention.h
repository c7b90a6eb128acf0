// Causal attention over a paged KV cache, one (query token, head) pair per work item.
#pragma once

#include <cstdint>

namespace tracelm::cpu {

// Largest head_dim the kernel's on-stack accumulator holds; the model loader rejects larger ones.
constexpr int kMaxHeadDim = 512;

struct PagedAttentionArgs {
    const float* q;                // [T, heads*head_dim]
    const float* k_cache;          // [slots, kv_heads*head_dim]
    const float* v_cache;
    const int32_t* block_tables;   // [num_seqs, max_blocks]
    const int32_t* seq_lens;       // [num_seqs]
    const int32_t* query_start;    // [num_seqs + 1]
    float* out;                    // [T, heads*head_dim]
    int64_t num_slots;
    int num_seqs, max_blocks, block_size;
    int heads, kv_heads, head_dim;
    float scale;
};

// Items are t * heads + h for t in [0, T).
void paged_attention_range(const PagedAttentionArgs& a, int64_t begin, int64_t end);

// One work item (query row t = item / heads, head h = item % heads): an online softmax in f32 over the cached
// positions handed to attend(), in the order given. Dense paged attention hands it every position the row may
// see; sparse attention (ops/dsa/sparse_attention.h) a selection of them.
class PagedAttentionItem {
   public:
    PagedAttentionItem(const PagedAttentionArgs& a, int64_t item);
    // The row may see cached positions [0, visible()): causal, within its block table row; none when the row
    // belongs to no sequence.
    int64_t visible() const { return visible_; }
    // Attends to position pos < visible(); a position whose block is unassigned or outside the pool is skipped.
    void attend(int64_t pos);
    // Writes the normalised output: zeros when nothing was attended.
    void finish();

   private:
    const PagedAttentionArgs& a_;
    const float* q_ = nullptr;
    float* out_ = nullptr;
    const int32_t* table_ = nullptr;
    int64_t kv_off_ = 0;
    int64_t visible_ = 0;
    float m_;  // running max of the scores
    float l_ = 0.0f;  // running denominator
    float acc_[kMaxHeadDim];
};

}  // namespace tracelm::cpu
