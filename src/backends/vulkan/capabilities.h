// What the Vulkan backend runs, known without a device (plain C++, part of the core library), so that the model
// loader and the tests can ask on any machine.
#pragma once

#include "runtime/backend.h"

namespace tracelm::vulkan {

// Largest head_dim of rope_neox and attention (their per-head rows live in a workgroup's shared memory).
constexpr int kMaxHeadDim = 512;

// f32/bf16/f16 and GGML's 32-element block weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), f32/f16 KV caches, head_dim <=
// kMaxHeadDim.
const BackendCapabilities& capabilities();

}  // namespace tracelm::vulkan
