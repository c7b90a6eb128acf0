// What the argument checks of several op families share (each family's own checks live beside its entry points in
// src/ops/<family>/): every backend rejects the same calls with the same std::invalid_argument ("<op>: <what>")
// before it touches memory. What differs between backends (weight and KV types, head sizes) comes from their
// BackendCapabilities.
#pragma once

#include <string>
#include <vector>

#include "runtime/backend.h"

namespace tracelm::checks {

void require(bool ok, const char* op, const std::string& what);
void require_dtype(const Tensor& t, DType dt, const char* op);
bool is_float_weight(DType dt);
// Every type a GGUF or safetensors weight may have that matmul can take: f32, bf16, f16 and the GGML block types;
// and the repacked types the fast numerics make of them at load (formats/repack.h).
const std::vector<DType>& all_weight_types();
// w: a weight type of `caps`, whole blocks per row when quantized.
void weight(const Tensor& w, const char* op, const BackendCapabilities& caps);
// A norm weight: f32, bf16 or f16 of `length` values.
void norm_weight(const Tensor& w, int64_t length, const char* op);
// A K/V cache pair of one KV type of `caps`.
void kv_cache(const Tensor& k_cache, const Tensor& v_cache, const char* op, const BackendCapabilities& caps);
// Three f32 tensors of one element count (add, silu_mul, and the fused ops that start with them).
void same_size_f32(const Tensor& a, const Tensor& b, const Tensor& out, const char* op);

}  // namespace tracelm::checks
