// The DSA lightning indexer score: how much query row t wants key s,
// scores[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s]), with one indexer key per position shared by the heads.
//
// dsa_indexer_paged(q [T, heads * D], weights [T, heads], key_cache [slots, D], meta, heads, scores [T, max_keys])
// reads the keys through a step's block tables: row t = query_start_loc[s] + i of sequence s scores the positions
// p of its causal window [0, min(seq_len - q_len + i + 1, max_keys)) (dsa_topk_causal's window, ops/dsa/dsa_topk.h)
// with the key at slot block_tables[s][p / block_size] * block_size + p % block_size. A position whose block is -1,
// beyond the table row or whose slot is outside the pool scores -inf, so that no top-k picks it before a real key
// (it may still fill a window of fewer real keys than topk, which sparse_attention then skips as unassigned).
// Positions at or past the window, and the rows of no sequence, are not written: unspecified, and ignored by
// dsa_topk_causal. Every score is dsa_indexer's for the same q, weights and key, bit for bit, and a row costs its
// window, not max_keys.
//
// This header is also compiled by nvcc (the CUDA kernel uses paged_key_slot on the device).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/attention/attention.h"
#include "ops/dsa/dsa_topk.h"
#include "runtime/tensor.h"

namespace tracelm::dsa {

// Throws std::invalid_argument ("dsa_indexer: ...") unless the tensors are f32 with the shapes above and
// heads > 0.
void check_indexer_args(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads, const Tensor& scores);
// The same for dsa_indexer_paged ("dsa_indexer_paged: ..."), with meta checked as attention's.
void check_indexer_paged_args(const Tensor& q, const Tensor& weights, const Tensor& key_cache,
                              const AttentionMeta& meta, int heads, const Tensor& scores);

// The slot of position pos in a sequence's block table row of max_blocks entries; -1 when its block is unassigned,
// beyond the row or outside a pool of num_slots.
TRACELM_HD inline int64_t paged_key_slot(const int32_t* table, int64_t max_blocks, int block_size, int64_t num_slots,
                                         int64_t pos) {
    const int64_t b = pos / block_size;
    if (b >= max_blocks || table[b] < 0) return -1;
    const int64_t slot = static_cast<int64_t>(table[b]) * block_size + pos % block_size;
    return slot < num_slots ? slot : -1;
}

}  // namespace tracelm::dsa

namespace tracelm::reference {

// The indexer score in double precision: q [T, heads * D], weights [T, heads], keys [nk, D] -> scores [T, nk].
std::vector<double> dsa_indexer(std::span<const float> q, std::span<const float> weights, std::span<const float> keys,
                                int heads, int64_t D);

// dsa_indexer_paged in double precision over key_cache [slots, D]: scores [T, max_keys], NaN where the op leaves
// the score unspecified.
std::vector<double> dsa_indexer_paged(std::span<const float> q, std::span<const float> weights,
                                      std::span<const float> key_cache, const PagedAttentionMeta& meta, int heads,
                                      int64_t D, int64_t max_keys);

}  // namespace tracelm::reference
