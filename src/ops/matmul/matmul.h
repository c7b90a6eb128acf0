// The matmul family: matmul, matmuls (several outputs of one input) and glu_matmul (the down projection with
// its input fused), on float and GGML-quantized weights. Their interface and contract are in runtime/backend.h;
// matmul.cpp checks their arguments (the entry points every backend goes through), and this header declares the
// double-precision references the backends are tested against (tests/ops/test_matmul.cpp), on the weight's f32
// values (a quantized weight dequantized; quantized kernels also round the activations, so they are held to a bound,
// tests/backends/test_quant.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend.h"

namespace tracelm::reference {

// out[t, n] = sum_k x[t, k] * w[n, k] + bias[n] (bias empty: 0), with w [N, K].
std::vector<double> matmul(std::span<const float> x, std::span<const float> w, int64_t K, std::span<const float> bias);
// matmul(glu(gate, up, act), w) without rounding the product.
std::vector<double> glu_matmul(std::span<const float> gate, std::span<const float> up, Activation act,
                               std::span<const float> w, int64_t K);

}  // namespace tracelm::reference
