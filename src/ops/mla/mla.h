// Multi-head latent attention (DeepSeek-V3 / V3.2; docs/deepseek-v32-plan.md), in its absorbed form: the cache holds
// per token one latent c [L] and one rope key k_pe [R] shared by every head (cache_write, ops/attention), queries are
// moved into the latent space by each head's own matrix, attention runs there, and its output leaves it the same way.
//
// mla_absorb(x [T, heads*K] f32, w [heads*N, K] f32/bf16/f16, heads, out [T, heads*N] f32):
//   out[t, h*N + n] = sum_k x[t, h*K + k] * w[h*N + n, k], summed in k order as matmul's f32 dot (a row's result
//   depends on that row only). q_lat = absorb(q_nope, W_UK^T per head), o = absorb(o_lat, W_UV).
// mla_attention(q_lat [T, heads*L], q_pe [T, heads*R], cache [slots, L + R] f32/f16, meta, indices, heads, scale,
//   out [T, heads*L]): for query row t of sequence s (rows from meta.query_start_loc) and head h, the positions p it
//   sees (as attention(): [0, seq_len - q_len + i], those with an assigned block; with indices, only those of
//   indices[t, :] in ascending order among them, -1 skipped, as sparse_attention()), the scores
//   (q_lat[h] . c_p + q_pe[h] . k_pe_p) * scale, an online softmax in f32 over the positions in ascending order, and
//   out[h] = sum_p softmax_p * c_p (zeros when the row sees nothing). Dense == sparse with every visible position
//   selected, bit for bit (one loop serves both).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend.h"

namespace tracelm::reference {

// mla_attention in double precision on host arrays (f32 cache values), for the op tests: `selected` empty means
// dense, else one list of positions per query row.
std::vector<double> mla_attention(std::span<const float> q_lat, std::span<const float> q_pe,
                                  std::span<const float> cache, const std::vector<int32_t>& block_tables,
                                  int max_blocks, const std::vector<int32_t>& seq_lens,
                                  const std::vector<int32_t>& query_start_loc, int block_size, int heads, int latent,
                                  int rope, double scale, const std::vector<std::vector<int64_t>>& selected);

}  // namespace tracelm::reference
