#include <cstdint>

#include "backends/cpu/ops/op_support.h"

namespace tracelm::cpu {


namespace {

struct KvWriteArgs {
    const float* k;
    const float* v;
    const int32_t* slots;
    void* k_cache;
    void* v_cache;
    int64_t dim, num_slots;
    bool f16;
};
void run_kv_write(const KvWriteArgs& a, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
        const int64_t slot = a.slots[t];
        if (slot < 0 || slot >= a.num_slots) continue;
        store_kv_row(a.k + t * a.dim, a.k_cache, slot, a.dim, a.f16);
        store_kv_row(a.v + t * a.dim, a.v_cache, slot, a.dim, a.f16);
    }
}

struct CacheWriteArgs {
    const float* parts[Backend::kMaxCacheParts];
    int64_t widths[Backend::kMaxCacheParts];
    size_t count;
    const int32_t* slots;
    void* cache;
    int64_t width, num_slots;
    bool f16;
};
void run_cache_write(const CacheWriteArgs& a, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
        const int64_t slot = a.slots[t];
        if (slot < 0 || slot >= a.num_slots) continue;
        // Each part as its own one-row "cache" at its column offset: store_kv_row's rounding.
        int64_t col = 0;
        for (size_t i = 0; i < a.count; ++i) {
            const size_t at = static_cast<size_t>(slot * a.width + col) * (a.f16 ? 2 : 4);
            store_kv_row(a.parts[i] + t * a.widths[i], static_cast<char*>(a.cache) + at, 0, a.widths[i], a.f16);
            col += a.widths[i];
        }
    }
}

}  // namespace

void CpuBackend::do_cache_write(std::span<const Tensor> parts, const Tensor& slot_mapping, const Tensor& cache) {
    CacheWriteArgs a{};
    Footprint fp;
    for (size_t i = 0; i < parts.size(); ++i) {
        a.parts[i] = parts[i].ptr<float>();
        a.widths[i] = parts[i].cols;
        fp.read(parts[i]);
    }
    a.count = parts.size();
    a.slots = slot_mapping.ptr<int32_t>();
    a.cache = cache.raw();
    a.width = cache.cols;
    a.num_slots = cache.rows;
    a.f16 = cache.dtype == DType::F16;
    submit(run_cache_write, a, fp.read(slot_mapping).write(cache), slot_mapping.numel());
}

PagedAttentionArgs attention_args(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const AttentionMeta& meta, int heads, int kv_heads, int head_dim, float scale,
                                  const Tensor& out) {
    return {q.ptr<float>(),
            k_cache.raw(),
            v_cache.raw(),
            meta.block_tables.ptr<int32_t>(),
            meta.seq_lens.ptr<int32_t>(),
            meta.query_start_loc.ptr<int32_t>(),
            out.ptr<float>(),
            k_cache.rows,
            meta.num_seqs,
            static_cast<int>(meta.block_tables.cols),
            meta.block_size,
            heads,
            kv_heads,
            head_dim,
            scale,
            meta.window};
}

Footprint attention_footprint(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                              const Tensor& out) {
    return Footprint()
        .read(q)
        .read(k_cache)
        .read(v_cache)
        .read(meta.block_tables)
        .read(meta.seq_lens)
        .read(meta.query_start_loc)
        .write(out);
}

void CpuBackend::do_kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                          const Tensor& v_cache) {
    submit(run_kv_write,
           KvWriteArgs{k.ptr<float>(), v.ptr<float>(), slot_mapping.ptr<int32_t>(), k_cache.raw(), v_cache.raw(),
                       k.cols, k_cache.rows, k_cache.dtype == DType::F16},
           Footprint().read(k).read(v).read(slot_mapping).write(k_cache).write(v_cache), k.rows);
}

void CpuBackend::do_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                           int heads, int kv_heads, int head_dim, float scale, const Tensor& out) {
    const PagedAttentionArgs a =
        attention_args(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, scale, out);
    const Footprint fp = attention_footprint(q, k_cache, v_cache, meta, out);
    // Threads claim (row, head) items as they go where a step has enough rows: a row's cost grows with its length,
    // which differs between the rows of a step. A claim takes a kv head's query heads at least (one load of its keys
    // and values serves them all); a step of few rows has too few of those to share out that way and splits its
    // items evenly.
    const int64_t group = heads / kv_heads;
    const int64_t chunk = q.rows * kv_heads >= 4 * threads() ? group : 0;
    if (k_cache.dtype == DType::F32) {
        submit(paged_attention_range, a, fp, q.rows * heads, 1, chunk);
        return;
    }
    // The workspace stays out of the footprint for the reason the quantized matmul's scratch does: a thread uses
    // its own slice only.
    const int64_t need = f16_attention_workspace_floats(meta.block_tables.cols * meta.block_size, head_dim);
    Buffer* ws = scratch_buffer(kAttentionScratchName, static_cast<size_t>(need * threads()) * sizeof(float));
    const auto floats = static_cast<int64_t>(scratch_slice_bytes(*ws, threads()) / sizeof(float));
    submit(paged_attention_f16_range,
           F16AttentionArgs{a, active_kernels().f16_attention, static_cast<float*>(ws->data), floats,
                            meta.interleaved_pairs, true},
           fp, q.rows * heads, 1, chunk);
}

}  // namespace tracelm::cpu
