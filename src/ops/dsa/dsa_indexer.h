// The DSA lightning indexer score: how much query row t wants key s,
// scores[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s]), with one indexer key per position shared by the heads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/tensor.h"

namespace tracelm::dsa {

// Throws std::invalid_argument ("dsa_indexer: ...") unless the tensors are f32 with the shapes above and
// heads > 0.
void check_indexer_args(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads, const Tensor& scores);

}  // namespace tracelm::dsa

namespace tracelm::reference {

// The indexer score in double precision: q [T, heads * D], weights [T, heads], keys [nk, D] -> scores [T, nk].
std::vector<double> dsa_indexer(std::span<const float> q, std::span<const float> weights, std::span<const float> keys,
                                int heads, int64_t D);

}  // namespace tracelm::reference
