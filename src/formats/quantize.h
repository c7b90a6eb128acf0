// Converting f32 weights into the dtypes a GGUF file stores: GGML's Q8_0 and Q4_0 blocks with the reference
// rounding of ggml-quants.c (which the gguf Python package reproduces bit for bit), Q4_K and Q6_K blocks by a plain
// fit of our own (valid blocks, not ggml's error-minimising search: for random test checkpoints), and the plain
// float types.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace tracelm {

// Whether quantize_row writes `dt`: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K.
bool can_quantize_to(DType dt);

// Writes n values of x as dtype_row_bytes(dt, n) bytes at out. Per 32-element block:
//   Q8_0: d = max|x| / 127, q = roundf(x / d) (ties away from zero);
//   Q4_0: m = the element of largest magnitude (the first of equals), d = m / -8, q = min(15, trunc(x / d + 8.5));
// in both, x / d is x times the f32 reciprocal of d (0 when d is 0) and d is stored as f16 (round to nearest
// even). Per 256-element block: Q4_K: each sub-block of 32 spans [min(0, lowest), max(0, highest)] in 15 steps;
// Q6_K: each sub-block of 16 spans +-(its largest magnitude) in 31 steps; the steps (and Q4_K's mins) rounded up to
// 6-bit (Q6_K: int8) multiples of the block's f16 scales, so every value is within half its step. F16 and BF16
// round to nearest even. Throws std::invalid_argument for another dtype or an n that is not
// a whole number of blocks.
void quantize_row(DType dt, const float* x, int64_t n, void* out);

}  // namespace tracelm
