// Multi-head latent attention on the CPU (ops/mla/mla.h): the absorbed per-head projections and attention over the
// shared latent cache, one (query row, head) per work item.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/ops/op_support.h"

namespace tracelm::cpu {

namespace {

// Widest latent cache row the work items' on-stack buffers hold (DeepSeek-V3: 512 + 64).
constexpr int64_t kMaxLatentRow = 1024;

struct AbsorbArgs {
    const float* x;
    const void* w;
    float* out;
    int64_t heads, K, N;
    size_t w_head_bytes;
    DType wt;
};
// Item t * heads + h: a one-row product, so a row's bits never depend on the others.
void run_absorb(const AbsorbArgs& a, int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
        const int64_t t = item / a.heads, h = item % a.heads;
        matmul(a.x + (t * a.heads + h) * a.K, 1, a.K, static_cast<const char*>(a.w) + static_cast<size_t>(h) * a.w_head_bytes,
               a.wt, nullptr, a.out + (t * a.heads + h) * a.N, a.N, 0, a.N);
    }
}

struct MlaArgs {
    const float* q_lat;
    const float* q_pe;
    const void* cache;
    const int32_t* block_tables;
    const int32_t* seq_lens;
    const int32_t* query_start;
    const int64_t* indices;  // null: dense
    float* out;
    int64_t num_slots, topk;
    int num_seqs, max_blocks, block_size, heads, latent, rope;
    float scale;
    bool f16;
};

void run_mla_attention(const MlaArgs& a, int64_t b, int64_t e) {
    PagedAttentionArgs pa{};
    pa.block_tables = a.block_tables;
    pa.seq_lens = a.seq_lens;
    pa.query_start = a.query_start;
    pa.num_slots = a.num_slots;
    pa.num_seqs = a.num_seqs;
    pa.max_blocks = a.max_blocks;
    pa.block_size = a.block_size;
    const int64_t width = a.latent + a.rope;
    float acc[kMaxLatentRow], converted[kMaxLatentRow];
    for (int64_t item = b; item < e; ++item) {
        const int64_t t = item / a.heads;
        const float* ql = a.q_lat + item * a.latent;
        const float* qp = a.q_pe + item * a.rope;
        const QueryRow row = query_row(pa, t);
        float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
        std::fill(acc, acc + a.latent, 0.0f);
        // Positions in ascending order, dense or selected: the same operations either way.
        const auto attend = [&](int64_t pos) {
            if (pos < row.start || pos >= row.visible) return;
            const int64_t slot = slot_of(pa, row, pos);
            if (slot < 0) return;
            const float* c = static_cast<const float*>(a.cache) + slot * width;
            if (a.f16) {
                const uint16_t* r = static_cast<const uint16_t*>(a.cache) + slot * width;
                for (int64_t i = 0; i < width; ++i) converted[i] = f16_to_f32(r[i]);
                c = converted;
            }
            const float score = (dot_f32(ql, c, a.latent) + dot_f32(qp, c + a.latent, a.rope)) * a.scale;
            if (score > m) {
                const float correction = std::exp(m - score);
                l *= correction;
                for (int64_t d = 0; d < a.latent; ++d) acc[d] *= correction;
                m = score;
            }
            const float p = std::exp(score - m);
            l += p;
            axpy_f32(p, c, acc, a.latent);
        };
        if (a.indices) {
            for (int64_t j = 0; j < a.topk; ++j) attend(a.indices[t * a.topk + j]);
        } else {
            for (int64_t pos = row.start; pos < row.visible; ++pos) attend(pos);
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float* o = a.out + item * a.latent;
        for (int64_t d = 0; d < a.latent; ++d) o[d] = acc[d] * inv;
    }
}

}  // namespace

void CpuBackend::do_mla_absorb(const Tensor& x, const Tensor& w, int heads, const Tensor& out) {
    const int64_t N = w.rows / heads;
    submit(run_absorb,
           AbsorbArgs{x.ptr<float>(), w.raw(), out.ptr<float>(), heads, x.cols / heads, N,
                      static_cast<size_t>(N) * w.row_bytes(), w.dtype},
           Footprint().read(x).read(w).write(out), x.rows * heads);
}

void CpuBackend::do_mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Tensor& cache,
                                  const AttentionMeta& meta, const Tensor* indices, int heads, float scale,
                                  const Tensor& out) {
    checks::require(cache.cols <= kMaxLatentRow, "mla_attention",
                    "cache rows wider than " + std::to_string(kMaxLatentRow) + " values");
    Footprint fp;
    fp.read(q_lat).read(q_pe).read(cache).read(meta.block_tables).read(meta.seq_lens).read(meta.query_start_loc);
    if (indices) fp.read(*indices);
    fp.write(out);
    submit(run_mla_attention,
           MlaArgs{q_lat.ptr<float>(), q_pe.ptr<float>(), cache.raw(), meta.block_tables.ptr<int32_t>(),
                   meta.seq_lens.ptr<int32_t>(), meta.query_start_loc.ptr<int32_t>(),
                   indices ? indices->ptr<int64_t>() : nullptr, out.ptr<float>(), cache.rows,
                   indices ? indices->cols : 0, meta.num_seqs, static_cast<int>(meta.block_tables.cols),
                   meta.block_size, heads, static_cast<int>(q_lat.cols / heads), static_cast<int>(q_pe.cols / heads),
                   scale, cache.dtype == DType::F16},
           fp, q_lat.rows * heads);
}

}  // namespace tracelm::cpu
