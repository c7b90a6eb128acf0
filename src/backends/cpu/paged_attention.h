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

}  // namespace tracelm::cpu
