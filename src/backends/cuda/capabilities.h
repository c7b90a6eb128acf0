// What the CUDA backend runs, known without a device (plain C++, part of the core library), so that the model
// loader and the tests can ask on any machine.
#pragma once

#include "runtime/backend.h"

namespace tracelm::cuda {

// Largest head_dim of rope_neox and attention.
constexpr int kMaxHeadDim = 512;

// f32/bf16/f16 weights (GGML block types are not supported yet), f32/f16 KV caches, head_dim <= kMaxHeadDim.
const BackendCapabilities& capabilities();

}  // namespace tracelm::cuda
