// The DSA lightning indexer score: how much query row t wants key s,
// scores[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s]), with one indexer key per position shared by the heads.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tracelm::dsa {

// Throws std::invalid_argument ("dsa_indexer: ...") unless the tensors are f32 with the shapes above and
// heads > 0.
void check_indexer_args(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads, const Tensor& scores);

}  // namespace tracelm::dsa
