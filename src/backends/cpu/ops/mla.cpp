// Multi-head latent attention on the CPU (ops/mla/mla.h): the absorbed per-head projections and attention over the
// shared latent cache, a group of one query row's heads per work item.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/ops/op_support.h"

namespace tracelm::cpu {

namespace {

// Widest latent cache row the work items' on-stack buffers hold (DeepSeek-V3: 512 + 64), and most heads per item.
constexpr int64_t kMaxLatentRow = 1024;
constexpr int64_t kMaxHeadGroup = 16;

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
    int num_seqs, max_blocks, block_size, heads, latent, rope, group;
    float scale;
    bool f16;
};

// Item t * groups + g: heads [g * group, (g + 1) * group) of query row t. A group's heads read each cache row once
// (converted once from f16), so the cache streams from memory once per group, not once per head; each head still
// sums its positions alone in ascending order, so its bits do not depend on the group.
void run_mla_attention(const MlaArgs& a, int64_t b, int64_t e) {
    PagedAttentionArgs pa{};
    pa.block_tables = a.block_tables;
    pa.seq_lens = a.seq_lens;
    pa.query_start = a.query_start;
    pa.num_slots = a.num_slots;
    pa.num_seqs = a.num_seqs;
    pa.max_blocks = a.max_blocks;
    pa.block_size = a.block_size;
    const int64_t width = a.latent + a.rope, groups = (a.heads + a.group - 1) / a.group;
    float acc[kMaxHeadGroup][kMaxLatentRow], converted[kMaxLatentRow], m[kMaxHeadGroup], l[kMaxHeadGroup];
    for (int64_t item = b; item < e; ++item) {
        const int64_t t = item / groups, h0 = item % groups * a.group, n = std::min<int64_t>(a.group, a.heads - h0);
        const QueryRow row = query_row(pa, t);
        for (int64_t h = 0; h < n; ++h) {
            m[h] = -std::numeric_limits<float>::infinity();
            l[h] = 0.0f;
            std::fill(acc[h], acc[h] + a.latent, 0.0f);
        }
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
            for (int64_t h = 0; h < n; ++h) {
                const int64_t head = t * a.heads + h0 + h;
                const float score =
                    (dot_f32(a.q_lat + head * a.latent, c, a.latent) + dot_f32(a.q_pe + head * a.rope, c + a.latent, a.rope)) *
                    a.scale;
                if (score > m[h]) {
                    const float correction = std::exp(m[h] - score);
                    l[h] *= correction;
                    for (int64_t d = 0; d < a.latent; ++d) acc[h][d] *= correction;
                    m[h] = score;
                }
                const float p = std::exp(score - m[h]);
                l[h] += p;
                axpy_f32(p, c, acc[h], a.latent);
            }
        };
        if (a.indices) {
            for (int64_t j = 0; j < a.topk; ++j) attend(a.indices[t * a.topk + j]);
        } else {
            for (int64_t pos = row.start; pos < row.visible; ++pos) attend(pos);
        }
        for (int64_t h = 0; h < n; ++h) {
            const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
            float* o = a.out + (t * a.heads + h0 + h) * a.latent;
            for (int64_t d = 0; d < a.latent; ++d) o[d] = acc[h][d] * inv;
        }
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
    // Heads per item: as many as leave every thread two items or more (a head's bits do not depend on it).
    const int group = static_cast<int>(
        std::clamp<int64_t>(q_lat.rows * heads / (2 * int64_t{threads()}), 1, std::min<int64_t>(heads, kMaxHeadGroup)));
    submit(run_mla_attention,
           MlaArgs{q_lat.ptr<float>(), q_pe.ptr<float>(), cache.raw(), meta.block_tables.ptr<int32_t>(),
                   meta.seq_lens.ptr<int32_t>(), meta.query_start_loc.ptr<int32_t>(),
                   indices ? indices->ptr<int64_t>() : nullptr, out.ptr<float>(), cache.rows,
                   indices ? indices->cols : 0, meta.num_seqs, static_cast<int>(meta.block_tables.cols),
                   meta.block_size, heads, static_cast<int>(q_lat.cols / heads), static_cast<int>(q_pe.cols / heads),
                   group, scale, cache.dtype == DType::F16},
           fp, q_lat.rows * ((heads + group - 1) / group));
}

}  // namespace tracelm::cpu
