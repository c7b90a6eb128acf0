// The attention family's entry points: arguments checked once, then the backend's do_<op>.
#include "ops/attention/attention.h"

#include "runtime/op_checks.h"

namespace tracelm {

using checks::require;
using checks::require_dtype;

void checks::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                       int heads, int kv_heads, int head_dim, const Tensor& out, const char* op,
                       const BackendCapabilities& caps) {
    for (const Tensor* t : {&q, &out}) require_dtype(*t, DType::F32, op);
    kv_cache(k_cache, v_cache, op, caps);
    attention_meta(meta, op);
    require(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && head_dim > 0 && head_dim <= caps.max_head_dim, op,
            "bad head geometry");
    require(q.cols == static_cast<int64_t>(heads) * head_dim && out.rows == q.rows && out.cols == q.cols &&
                k_cache.cols == static_cast<int64_t>(kv_heads) * head_dim && v_cache.cols == k_cache.cols,
            op, "shape mismatch");
}

void checks::attention_meta(const AttentionMeta& meta, const char* op) {
    for (const Tensor* t : {&meta.block_tables, &meta.seq_lens, &meta.query_start_loc}) require_dtype(*t, DType::I32, op);
    require(meta.num_seqs > 0 && meta.block_size > 0 && meta.block_tables.rows >= meta.num_seqs &&
                meta.seq_lens.numel() >= meta.num_seqs && meta.query_start_loc.numel() >= meta.num_seqs + 1,
            op, "bad metadata");
    require(meta.window >= 0, op, "negative sliding window");
}

void Backend::kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                       const Tensor& v_cache) {
    for (const Tensor* t : {&k, &v}) require_dtype(*t, DType::F32, "kv_write");
    checks::kv_cache(k_cache, v_cache, "kv_write", capabilities());
    require_dtype(slot_mapping, DType::I32, "kv_write");
    require(k.cols == k_cache.cols && v.cols == v_cache.cols && k.cols == v.cols && k.rows == v.rows &&
                slot_mapping.numel() == k.rows && k_cache.rows == v_cache.rows,
            "kv_write", "shape mismatch");
    do_kv_write(k, v, slot_mapping, k_cache, v_cache);
}

void Backend::cache_write(std::span<const Tensor> parts, const Tensor& slot_mapping, const Tensor& cache) {
    require(!parts.empty() && parts.size() <= kMaxCacheParts, "cache_write",
            "1 to " + std::to_string(kMaxCacheParts) + " parts");
    require(capabilities().has_kv_type(cache.dtype), "cache_write",
            "cache type " + std::string(dtype_name(cache.dtype)) + " is not one of " +
                BackendCapabilities::list(capabilities().kv_types));
    require_dtype(slot_mapping, DType::I32, "cache_write");
    int64_t width = 0;
    for (const Tensor& p : parts) {
        require_dtype(p, DType::F32, "cache_write");
        require(p.rows == slot_mapping.numel(), "cache_write", "part '" + p.name() + "' needs one row per slot");
        width += p.cols;
    }
    require(width == cache.cols, "cache_write", "the parts' widths do not add up to the cache row's");
    do_cache_write(parts, slot_mapping, cache);
}

void Backend::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                        int heads, int kv_heads, int head_dim, float scale, const Tensor& out) {
    checks::attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, out, "attention", capabilities());
    do_attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, scale, out);
}

}  // namespace tracelm
