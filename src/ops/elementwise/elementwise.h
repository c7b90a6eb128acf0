// The elementwise family: copy, embedding, add, glu, gather_last. Their interface and contract are in
// runtime/backend.h; elementwise.cpp checks their arguments (the entry points every backend goes through), and this
// header declares the references the backends are tested against (tests/ops/test_elementwise.cpp): plain loops on
// host arrays, in double precision where the op computes. copy's reference is the identity.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend.h"

namespace tracelm::reference {

// out[t, :] = table[ids[t], :] * scale for a table of `cols` columns given as f32 values (a quantized table
// dequantized), rounded to f32; ids outside [0, rows) give a zero row.
std::vector<float> embedding(std::span<const int32_t> ids, std::span<const float> table, int64_t cols,
                             float scale = 1.0f);
std::vector<double> add(std::span<const float> a, std::span<const float> b);
// act(gate) * up: silu(x) = x / (1 + e^-x); gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); the
// f16-table GELU is gelu_tanh of x rounded to f16, rounded to f16 (0 at x <= -10, x at x >= 10).
std::vector<double> glu(std::span<const float> gate, std::span<const float> up, Activation act);
// Row s of the result is the last row of sequence s, x[query_start_loc[s + 1] - 1, :]; a sequence whose last row
// is not in x (one with no rows at the start) gives a zero row.
std::vector<float> gather_last(std::span<const float> x, int64_t cols, std::span<const int32_t> query_start_loc);

}  // namespace tracelm::reference
