// Argument checks of the Backend ops (dtypes and shapes), written once and called by Backend's entry points, so
// that every backend rejects the same calls with the same std::invalid_argument ("<op>: <what>") before it touches
// memory.
// What differs between backends (weight and KV types, head sizes) comes from their BackendCapabilities.
#pragma once

#include <string>

#include "runtime/backend.h"

namespace tracelm::checks {

void require(bool ok, const char* op, const std::string& what);
void require_dtype(const Tensor& t, DType dt, const char* op);
bool is_float_weight(DType dt);
// Every type a GGUF or safetensors weight may have that matmul can take: f32, bf16, f16 and the GGML block types;
// and the repacked types the fast numerics make of them at load (formats/repack.h).
const std::vector<DType>& all_weight_types();

void copy(const Tensor& dst, const Tensor& src);
// table: a weight type of `caps`, whole blocks per row when quantized.
void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, const BackendCapabilities& caps);
void rms_norm(const Tensor& x, const Tensor& w, const Tensor& out);
// w: a weight type of `caps`, whole blocks per row when quantized.
void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out, const BackendCapabilities& caps);
// theta finite and positive; factors empty or head_dim/2 finite positive values.
void rope_spec(const RopeSpec& rope, int head_dim, const char* op);
void rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope,
               const BackendCapabilities& caps);
// A K/V cache pair of one KV type of `caps`.
void kv_cache(const Tensor& k_cache, const Tensor& v_cache, const char* op, const BackendCapabilities& caps);
void kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
              const Tensor& v_cache, const BackendCapabilities& caps);
// attention and sparse_attention (named `op` in errors).
void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta, int heads,
               int kv_heads, int head_dim, const Tensor& out, const char* op, const BackendCapabilities& caps);
// The indices of sparse_attention (checked beside attention()'s arguments): i64, one row per query row.
void sparse_attention_indices(const Tensor& q, const Tensor& indices);
// add and silu_mul: three f32 tensors of one element count.
void elementwise(const Tensor& a, const Tensor& b, const Tensor& out, const char* op);
// 1 to Backend::kMaxMatmuls outputs, each a valid matmul of x.
void matmuls(const Tensor& x, std::span<const MatmulOut> outs, const BackendCapabilities& caps);
void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, const Tensor& out);
void qk_norm_rope_kv_write(const QkvPrologue& p, const BackendCapabilities& caps);
void silu_mul_matmul(const Tensor& gate, const Tensor& up, const Tensor& w, const Tensor& out,
                     const BackendCapabilities& caps);
void gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out);
void argmax(const Tensor& logits, const Tensor& ids);
void advance_decode(const Tensor& sampled, const DecodeState& st);

}  // namespace tracelm::checks
