#include <cstdint>

#include "backends/cpu/kernels/dsa_topk.h"
#include "backends/cpu/ops/op_support.h"
#include "ops/dsa/dsa_indexer.h"
#include "ops/dsa/dsa_topk.h"

namespace tracelm::cpu {

namespace {

struct IndexerArgs {
    const float* q;        // [rows, heads * dim]
    const float* weights;  // [rows, heads]
    const float* keys;     // [num_keys, dim]
    float* scores;         // [rows, num_keys]
    int64_t num_keys;
    int64_t heads, dim;
};

// Items are t * num_keys + s. Heads are summed in order in f32.
void indexer_range(const IndexerArgs& a, int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / a.num_keys;
        const float* k = a.keys + item % a.num_keys * a.dim;
        const float* q = a.q + t * a.heads * a.dim;
        const float* w = a.weights + t * a.heads;
        float score = 0.0f;
        for (int64_t h = 0; h < a.heads; ++h) {
            const float dot = dot_f32(q + h * a.dim, k, a.dim);
            if (dot > 0.0f) score += w[h] * dot;
        }
        a.scores[item] = score;
    }
}

struct SparseAttentionArgs {
    PagedAttentionArgs attention;
    const int64_t* indices;  // [T, topk] cached positions per query row; -1 entries are padding
    int64_t topk;
};

// Items are t * heads + h, as in cpu::paged_attention_range. Positions the row may not see (negative, or at
// or past PagedAttentionItem::visible()) are skipped; the rest are attended in the order given, so ascending
// indices that cover every visible position reproduce paged_attention_range bit for bit.
void sparse_attention_range(const SparseAttentionArgs& a, int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
        PagedAttentionItem it(a.attention, item);
        const int64_t* selected = a.indices + item / a.attention.heads * a.topk;
        for (int64_t j = 0; j < a.topk; ++j) {
            if (selected[j] >= 0 && selected[j] < it.visible()) it.attend(selected[j]);
        }
        it.finish();
    }
}

}  // namespace

size_t CpuBackend::dsa_topk_workspace_bytes(int64_t, int64_t max_keys) const {
    // One scratch slot per pool thread, whatever the number of rows.
    return dsa::array_bytes(threads(), dsa::topk_cpu_slot_elems(max_keys), sizeof(uint32_t));
}

void CpuBackend::do_dsa_topk(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                          const DsaTopkWorkspace& ws, const Tensor& indices) {
    if (scores.rows == 0) return;
    submit(dsa::topk_cpu_range,
           dsa::TopkCpuArgs{scores.ptr<float>(), window_start.ptr<int64_t>(), window_end.ptr<int64_t>(),
                            indices.ptr<int64_t>(), static_cast<uint32_t*>(ws.buffer->data), scores.rows, scores.cols,
                            indices.cols, dsa::topk_cpu_slot_elems(ws.max_keys), threads(), active_isa()},
           Footprint()
               .read(scores)
               .read(window_start)
               .read(window_end)
               .write(indices)
               .write(ByteRange{reinterpret_cast<uintptr_t>(ws.buffer->data),
                                reinterpret_cast<uintptr_t>(ws.buffer->data) + ws.buffer->bytes}),
           threads());
}

void CpuBackend::do_dsa_indexer(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads,
                             const Tensor& scores) {
    submit(indexer_range,
           IndexerArgs{q.ptr<float>(), weights.ptr<float>(), keys.ptr<float>(), scores.ptr<float>(), keys.rows,
                            heads, keys.cols},
           Footprint().read(q).read(weights).read(keys).write(scores), scores.numel(), 16);
}

void CpuBackend::do_sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const AttentionMeta& meta, const Tensor& indices, int heads, int kv_heads,
                                  int head_dim, float scale, const Tensor& out) {
    const PagedAttentionArgs a =
        attention_args(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, scale, out);
    checks::require(k_cache.dtype == DType::F32, "sparse_attention", "needs an f32 KV cache");
    submit(sparse_attention_range, SparseAttentionArgs{a, indices.ptr<int64_t>(), indices.cols},
           attention_footprint(q, k_cache, v_cache, meta, out).read(indices), q.rows * heads);
}

}  // namespace tracelm::cpu
