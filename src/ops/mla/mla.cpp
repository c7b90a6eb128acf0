// The MLA family's entry points: arguments checked once, then the backend's do_<op>.
#include "ops/mla/mla.h"

#include "runtime/op_checks.h"

namespace tracelm {

using checks::require;
using checks::require_dtype;

void Backend::mla_absorb(const Tensor& x, const Tensor& w, int heads, const Tensor& out) {
    require_dtype(x, DType::F32, "mla_absorb");
    require_dtype(out, DType::F32, "mla_absorb");
    require(checks::is_float_weight(w.dtype), "mla_absorb", "weights must be f32, bf16 or f16");
    require(heads > 0 && x.cols % heads == 0 && w.rows % heads == 0 && w.cols == x.cols / heads &&
                out.rows == x.rows && out.cols == w.rows,
            "mla_absorb", "x [T, heads*K], w [heads*N, K] and out [T, heads*N] disagree");
    do_mla_absorb(x, w, heads, out);
}

void Backend::mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Tensor& cache, const AttentionMeta& meta,
                            const Tensor* indices, int heads, float scale, const Tensor& out) {
    const char* op = "mla_attention";
    for (const Tensor* t : {&q_lat, &q_pe, &out}) require_dtype(*t, DType::F32, op);
    require(capabilities().has_kv_type(cache.dtype), op, "cache type " + std::string(dtype_name(cache.dtype)) +
                                                              " is not one of " +
                                                              BackendCapabilities::list(capabilities().kv_types));
    for (const Tensor* t : {&meta.block_tables, &meta.seq_lens, &meta.query_start_loc}) require_dtype(*t, DType::I32, op);
    require(heads > 0 && q_lat.cols % heads == 0 && q_pe.cols % heads == 0 && q_pe.rows == q_lat.rows &&
                out.rows == q_lat.rows && out.cols == q_lat.cols && cache.cols == (q_lat.cols + q_pe.cols) / heads,
            op, "q_lat [T, heads*L], q_pe [T, heads*R], cache [slots, L + R] and out [T, heads*L] disagree");
    require(meta.num_seqs > 0 && meta.block_size > 0 && meta.block_tables.rows >= meta.num_seqs &&
                meta.seq_lens.numel() >= meta.num_seqs && meta.query_start_loc.numel() >= meta.num_seqs + 1,
            op, "bad metadata");
    require(meta.window == 0, op, "a sliding window is not supported");
    if (indices) {
        require_dtype(*indices, DType::I64, op);
        require(indices->rows == q_lat.rows, op, "indices need one row per query row");
    }
    do_mla_attention(q_lat, q_pe, cache, meta, indices, heads, scale, out);
}

}  // namespace tracelm
