#include <algorithm>
#include <cmath>
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

// Row t's score of key k: heads summed in order in f32 (both indexers, so the paged one gives the same bits).
float indexer_score(const float* q, const float* weights, const float* k, int64_t t, int64_t heads, int64_t dim) {
    q += t * heads * dim;
    weights += t * heads;
    float score = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
        const float dot = dot_f32(q + h * dim, k, dim);
        if (dot > 0.0f) score += weights[h] * dot;
    }
    return score;
}

// Items are t * num_keys + s.
void indexer_range(const IndexerArgs& a, int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item)
        a.scores[item] = indexer_score(a.q, a.weights, a.keys + item % a.num_keys * a.dim, item / a.num_keys, a.heads,
                                       a.dim);
}

struct PagedIndexerArgs {
    const float* q;          // [rows, heads * dim]
    const float* weights;    // [rows, heads]
    const float* key_cache;  // [num_slots, dim]
    float* scores;           // [rows, max_keys]
    dsa::CausalRows rows;
    const int32_t* block_tables;  // [num_seqs, max_blocks]
    int64_t max_blocks, num_slots, max_keys, chunks;
    int block_size;
    int64_t heads, dim;
};

// Positions a paged indexer item scores: a row's window is cut in chunks of this many, so that a row costs its
// window (chunks past it return at once) and a long decode row still spreads over the threads.
constexpr int64_t kIndexerChunk = 64;

// Items are t * chunks + c: positions [c * kIndexerChunk, (c + 1) * kIndexerChunk) of row t, within its window.
void paged_indexer_range(const PagedIndexerArgs& a, int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / a.chunks, p0 = item % a.chunks * kIndexerChunk;
        const dsa::CausalRow row = dsa::causal_row(a.rows, t);
        const int64_t p1 = std::min({row.end, a.max_keys, p0 + kIndexerChunk});
        if (row.seq < 0 || p0 >= p1) continue;
        const int32_t* table = a.block_tables + row.seq * a.max_blocks;
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t slot = dsa::paged_key_slot(table, a.max_blocks, a.block_size, a.num_slots, p);
            a.scores[t * a.max_keys + p] =
                slot < 0 ? -INFINITY : indexer_score(a.q, a.weights, a.key_cache + slot * a.dim, t, a.heads, a.dim);
        }
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

void CpuBackend::submit_topk(const Tensor& scores, const Tensor* window_start, const Tensor* window_end,
                             const AttentionMeta* meta, const DsaTopkWorkspace& ws, const Tensor& indices) {
    if (scores.rows == 0) return;
    Footprint fp;
    fp.read(scores).write(indices).write(ByteRange{reinterpret_cast<uintptr_t>(ws.buffer->data),
                                                   reinterpret_cast<uintptr_t>(ws.buffer->data) + ws.buffer->bytes});
    dsa::CausalRows causal;
    if (meta != nullptr) {
        causal = {meta->query_start_loc.ptr<int32_t>(), meta->seq_lens.ptr<int32_t>(), meta->num_seqs};
        fp.read(meta->query_start_loc).read(meta->seq_lens);
    } else {
        fp.read(*window_start).read(*window_end);
    }
    submit(dsa::topk_cpu_range,
           dsa::TopkCpuArgs{scores.ptr<float>(), window_start ? window_start->ptr<int64_t>() : nullptr,
                            window_end ? window_end->ptr<int64_t>() : nullptr, indices.ptr<int64_t>(),
                            static_cast<uint32_t*>(ws.buffer->data), scores.rows, scores.cols, indices.cols,
                            dsa::topk_cpu_slot_elems(ws.max_keys), threads(), active_isa(), causal},
           fp, threads());
}

void CpuBackend::do_dsa_topk(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                          const DsaTopkWorkspace& ws, const Tensor& indices) {
    submit_topk(scores, &window_start, &window_end, nullptr, ws, indices);
}

void CpuBackend::do_dsa_topk_causal(const Tensor& scores, const AttentionMeta& meta, const DsaTopkWorkspace& ws,
                                    const Tensor& indices) {
    submit_topk(scores, nullptr, nullptr, &meta, ws, indices);
}

void CpuBackend::do_dsa_indexer(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads,
                             const Tensor& scores) {
    submit(indexer_range,
           IndexerArgs{q.ptr<float>(), weights.ptr<float>(), keys.ptr<float>(), scores.ptr<float>(), keys.rows,
                            heads, keys.cols},
           Footprint().read(q).read(weights).read(keys).write(scores), scores.numel(), 16);
}

void CpuBackend::do_dsa_indexer_paged(const Tensor& q, const Tensor& weights, const Tensor& key_cache,
                                      const AttentionMeta& meta, int heads, const Tensor& scores) {
    const int64_t chunks = (scores.cols + kIndexerChunk - 1) / kIndexerChunk;
    submit(paged_indexer_range,
           PagedIndexerArgs{q.ptr<float>(), weights.ptr<float>(), key_cache.ptr<float>(), scores.ptr<float>(),
                            {meta.query_start_loc.ptr<int32_t>(), meta.seq_lens.ptr<int32_t>(), meta.num_seqs},
                            meta.block_tables.ptr<int32_t>(), meta.block_tables.cols, key_cache.rows, scores.cols,
                            chunks, meta.block_size, heads, key_cache.cols},
           Footprint()
               .read(q)
               .read(weights)
               .read(key_cache)
               .read(meta.block_tables)
               .read(meta.seq_lens)
               .read(meta.query_start_loc)
               .write(scores),
           scores.rows * chunks, 4);
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
