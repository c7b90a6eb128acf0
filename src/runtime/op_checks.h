// Argument checks of the Backend ops (dtypes and shapes), shared by the backends so that every backend
// rejects the same calls with the same std::invalid_argument ("<op>: <what>") before it touches memory.
#pragma once

#include <string>

#include "runtime/backend.h"

namespace tracelm::checks {

void require(bool ok, const char* op, const std::string& what);
void require_dtype(const Tensor& t, DType dt, const char* op);
bool is_float_weight(DType dt);

void copy(const Tensor& dst, const Tensor& src);
void embedding(const Tensor& ids, const Tensor& table, const Tensor& out);
void rms_norm(const Tensor& x, const Tensor& w, const Tensor& out);
void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out);
// theta finite and positive; factors empty or head_dim/2 finite positive values.
void rope_spec(const RopeSpec& rope, int head_dim, const char* op);
void rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope,
               int max_head_dim);
// A K/V cache pair: both f32 or both f16.
void kv_cache(const Tensor& k_cache, const Tensor& v_cache, const char* op);
void kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
              const Tensor& v_cache);
// attention and sparse_attention (named `op` in errors).
void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta, int heads,
               int kv_heads, int head_dim, int max_head_dim, const Tensor& out, const char* op);
// add and silu_mul: three f32 tensors of one element count.
void elementwise(const Tensor& a, const Tensor& b, const Tensor& out, const char* op);
// 1 to Backend::kMaxMatmuls outputs, each with a weight (each is then checked as a matmul by the backend).
void matmuls(std::span<const MatmulOut> outs);
void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, const Tensor& out);
void qk_norm_rope_kv_write(const QkvPrologue& p, int max_head_dim);
// w: float weights (f32/bf16/f16); backends taking quantized ones check those themselves.
void silu_mul_matmul(const Tensor& gate, const Tensor& up, const Tensor& w, const Tensor& out);
void gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out);
void argmax(const Tensor& logits, const Tensor& ids);
void advance_decode(const Tensor& sampled, const DecodeState& st);

}  // namespace tracelm::checks
