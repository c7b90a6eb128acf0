// The attention family: kv_write and causal paged attention over an f32 or f16 KV cache. Their interface and
// contract are in runtime/backend.h; attention.cpp checks their arguments (the entry points every backend goes
// through; sparse_attention, in ops/dsa, shares the attention checks), and this header declares the double-precision
// references the backends are tested against (tests/ops/test_attention.cpp), plain loops on host arrays.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend.h"

namespace tracelm {

namespace checks {
// The arguments of attention and sparse_attention (named `op` in errors).
void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta, int heads,
               int kv_heads, int head_dim, const Tensor& out, const char* op, const BackendCapabilities& caps);
// The metadata alone (i32 tensors, at least one sequence, a block size, table and lengths for each): also the
// paged DSA ops' (ops/dsa).
void attention_meta(const AttentionMeta& meta, const char* op);
}  // namespace checks

namespace reference {

// Row t of k and v ([T, dim]) goes to row slot_mapping[t] of k_cache and v_cache ([slots, dim], f32 values: an f16
// cache holds them rounded to nearest even); slots outside [0, slots) are skipped.
void kv_write(std::span<const float> k, std::span<const float> v, std::span<const int32_t> slot_mapping, int64_t dim,
              std::span<float> k_cache, std::span<float> v_cache);

// A paged-attention step's metadata, on the host: num_seqs = seq_lens.size().
struct PagedAttentionMeta {
    std::vector<int32_t> block_tables;     // [num_seqs, max_blocks], -1 where no block is assigned
    int max_blocks = 0;
    std::vector<int32_t> seq_lens;         // cached tokens of each sequence including this step's
    std::vector<int32_t> query_start_loc;  // [num_seqs + 1]: prefix sums of the query lengths
    int block_size = 0;
    int window = 0;  // attention() only: a query at position p sees (p - window, p]; 0: no window
};

// Causal paged attention with grouped KV heads: query i of a sequence with q_len new tokens and seq_len cached ones
// sees positions [0, seq_len - q_len + i] (with a window, the last `window` of them); position j of sequence s is in slot block_tables[s][j / block_size] *
// block_size + j % block_size, and positions without a block (or past the cache) are skipped. softmax(q.k * scale)
// weights the values, in double precision. q [T, heads * head_dim], caches [slots, kv_heads * head_dim] as f32 values;
// a query that sees nothing gives zeros.
std::vector<double> attention(std::span<const float> q, std::span<const float> k_cache, std::span<const float> v_cache,
                              const PagedAttentionMeta& meta, int heads, int kv_heads, int head_dim, double scale);
// attention() where query row t attends only to the positions selected[t] that it may see and that have a block
// (sparse_attention's rule, ops/dsa); other entries, -1 among them, are skipped.
std::vector<double> attention_over(std::span<const float> q, std::span<const float> k_cache,
                                   std::span<const float> v_cache, const PagedAttentionMeta& meta, int heads,
                                   int kv_heads, int head_dim, double scale,
                                   const std::vector<std::vector<int64_t>>& selected);

}  // namespace reference
}  // namespace tracelm
