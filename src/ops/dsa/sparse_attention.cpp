// The entry point of sparse_attention: attention()'s checks (ops/attention) and its indices', then the backend's
// do_sparse_attention.
#include "ops/attention/attention.h"
#include "runtime/op_checks.h"

namespace tracelm {

void Backend::sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                               const Tensor& indices, int heads, int kv_heads, int head_dim, float scale,
                               const Tensor& out) {
    checks::attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, out, "sparse_attention", capabilities());
    checks::require_dtype(indices, DType::I64, "sparse_attention");
    checks::require(indices.rows == q.rows, "sparse_attention", "indices need one row per query row");
    checks::require(meta.window == 0, "sparse_attention", "a sliding window is not supported");
    do_sparse_attention(q, k_cache, v_cache, meta, indices, heads, kv_heads, head_dim, scale, out);
}

}  // namespace tracelm
