#include "backends/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace tracelm::cpu {

QueryRow query_row(const PagedAttentionArgs& a, int64_t t) {
    // Which sequence this token belongs to (num_seqs is small; a scan beats a search).
    int s = 0;
    while (s < a.num_seqs && !(a.query_start[s] <= t && t < a.query_start[s + 1])) ++s;
    QueryRow row;
    if (s == a.num_seqs) return row;
    row.first = a.query_start[s];
    row.q_len = a.query_start[s + 1] - a.query_start[s];
    const int64_t end = static_cast<int64_t>(a.seq_lens[s]) - row.q_len + (t - a.query_start[s]) + 1;
    // Never read past the block table row: keys beyond it were never reserved.
    row.visible = std::min(end, static_cast<int64_t>(a.max_blocks) * a.block_size);
    if (a.window > 0) row.start = std::clamp<int64_t>(end - a.window, 0, std::max<int64_t>(row.visible, 0));
    row.table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks;
    return row;
}

namespace {
// The slot of position `within` of cache block `block` (-1: unassigned or out of range).
int64_t slot_in_block(const PagedAttentionArgs& a, int32_t block, int64_t within) {
    if (block < 0) return -1;
    const int64_t slot = static_cast<int64_t>(block) * a.block_size + within;
    return slot < a.num_slots ? slot : -1;
}
}  // namespace

int64_t slot_of(const PagedAttentionArgs& a, const QueryRow& row, int64_t pos) {
    return slot_in_block(a, row.table[pos / a.block_size], pos % a.block_size);
}

PagedAttentionItem::PagedAttentionItem(const PagedAttentionArgs& a, int64_t item)
    : a_(a), m_(-std::numeric_limits<float>::infinity()) {
    const int hd = a.head_dim;
    const int64_t t = item / a.heads;
    const int h = static_cast<int>(item % a.heads);
    q_ = a.q + t * a.heads * hd + static_cast<int64_t>(h) * hd;
    out_ = a.out + t * a.heads * hd + static_cast<int64_t>(h) * hd;
    kv_off_ = static_cast<int64_t>(h / (a.heads / a.kv_heads)) * hd;
    std::memset(acc_, 0, sizeof(float) * static_cast<size_t>(hd));
    row_ = query_row(a, t);
}

void PagedAttentionItem::attend(int64_t pos) {
    const int64_t slot = slot_of(a_, row_, pos);
    if (slot < 0) return;
    const int hd = a_.head_dim;
    const int64_t kv_stride = static_cast<int64_t>(a_.kv_heads) * hd;
    const float* k = static_cast<const float*>(a_.k_cache) + slot * kv_stride + kv_off_;
    const float* v = static_cast<const float*>(a_.v_cache) + slot * kv_stride + kv_off_;
    const float score = dot_f32(q_, k, hd) * a_.scale;
    if (score > m_) {
        const float correction = std::exp(m_ - score);
        l_ *= correction;
        for (int d = 0; d < hd; ++d) acc_[d] *= correction;
        m_ = score;
    }
    const float p = std::exp(score - m_);
    l_ += p;
    axpy_f32(p, v, acc_, hd);
}

void PagedAttentionItem::finish() {
    const float inv = l_ > 0.0f ? 1.0f / l_ : 0.0f;
    for (int d = 0; d < a_.head_dim; ++d) out_[d] = acc_[d] * inv;
}

void PagedAttentionItem::prefetch(int64_t pos) const {
    if (pos < row_.start || pos >= row_.visible) return;
    const int64_t slot = slot_of(a_, row_, pos);
    if (slot < 0) return;
    const int64_t bytes = static_cast<int64_t>(a_.head_dim) * static_cast<int64_t>(sizeof(float));
    const int64_t at = (slot * a_.kv_heads * a_.head_dim + kv_off_) * static_cast<int64_t>(sizeof(float));
    for (int64_t b = 0; b < bytes; b += 64) {
        __builtin_prefetch(static_cast<const char*>(a_.k_cache) + at + b);
        __builtin_prefetch(static_cast<const char*>(a_.v_cache) + at + b);
    }
}

void paged_attention_range(const PagedAttentionArgs& a, int64_t begin, int64_t end) {
    // A head's cache rows are too sparse for the hardware prefetchers (see attention_f16_x86.inc).
    constexpr int64_t kRowsAhead = 4;
    for (int64_t item = begin; item < end; ++item) {
        PagedAttentionItem it(a, item);
        for (int64_t pos = it.start(); pos < it.start() + kRowsAhead; ++pos) it.prefetch(pos);
        for (int64_t pos = it.start(); pos < it.visible(); ++pos) {
            it.prefetch(pos + kRowsAhead);
            it.attend(pos);
        }
        it.finish();
    }
}

namespace {

// ggml's MUL_MAT sums the P.V dot over positions in llama.cpp's n_kv, a multiple of 256: in 8 lanes (tinyBLAS)
// or 32 (vec_dot_f16: 4 accumulators of 8), with no tail. Masked and padded positions add exact zeros.
constexpr int kMaxLanes = 32;
// The most query heads of one kv head a decode row's kernel calls take at once: their scores and accumulators fit
// the workspace a tile's take.
constexpr int kGroup = 4;

// Where a row's computation may begin without changing a bit: the positions before a sliding window's start add
// exact zeros to every sum (ggml masks them with -inf), so they can be left out from a multiple of kMaxLanes on,
// which keeps every position in its lane.
int64_t lane_aligned(int64_t start) { return start / kMaxLanes * kMaxLanes; }

int64_t scores_floats(int64_t max_keys) { return (max_keys + 7) / 8 * 8; }

// Outputs [0, hd) from their lane accumulators acc[l * hd + d], each reduced as the dot order does. Element-wise
// across d (the compiler's vectors), so every output takes the same additions in the same order.
void reduce_lanes(const float* __restrict acc, int64_t hd, int lanes, float* __restrict out) {
    const auto a = [&](int l, int64_t d) { return acc[l * hd + d]; };
    if (lanes == 8) {  // tinyBLAS hsum
        for (int64_t d = 0; d < hd; ++d) {
            const float t0 = a(4, d) + a(0, d), t1 = a(5, d) + a(1, d), t2 = a(6, d) + a(2, d), t3 = a(7, d) + a(3, d);
            out[d] = (t0 + t2) + (t1 + t3);
        }
        return;
    }
    for (int64_t d = 0; d < hd; ++d) {
        float s[8];  // GGML_F32x8_REDUCE: (acc0 + acc2) + (acc1 + acc3), then two hadds
        for (int l = 0; l < 8; ++l) s[l] = (a(l, d) + a(16 + l, d)) + (a(8 + l, d) + a(24 + l, d));
        const float t0 = s[0] + s[4], t1 = s[1] + s[5], t2 = s[2] + s[6], t3 = s[3] + s[7];
        out[d] = (t0 + t1) + (t2 + t3);
    }
}

}  // namespace

int64_t f16_attention_workspace_floats(int64_t max_keys, int head_dim) {
    // The rows' cache offsets (int64), then per query of a tile its scores, its 8 lane accumulators and its q.
    // The untiled path fits in the same space: offsets, then for each of up to kGroup queries its scores, its 32
    // lane accumulators and its q in f16. 64-byte slices.
    static_assert(kGroup <= kF16AttentionTile && kGroup * (kMaxLanes + 1) <= kF16AttentionTile * 9);
    const int64_t scores = scores_floats(max_keys);
    const int64_t n = 2 * scores + kF16AttentionTile * (scores + 9 * static_cast<int64_t>(head_dim));
    return (n + 15) / 16 * 16;
}

namespace {

// Whether a sequence's query rows go through tiles: they sum in tinyBLAS's orders (>= 2 rows), which is what the
// tile kernels compute, for head dims tinyBLAS accepts.
bool tiled(const F16AttentionArgs& f, int64_t q_len) { return f.tiled && q_len >= 2 && f.a.head_dim % 8 == 0; }

// The cache offsets of a sequence's positions [from, row.visible) (-1 where unassigned or before masked_before)
// into offsets[from, row.visible); returns the first position with a cache row (row.visible if none).
int64_t cache_offsets(const PagedAttentionArgs& a, const QueryRow& row, int64_t* offsets, int64_t from,
                      int64_t masked_before) {
    const int64_t kv_stride = static_cast<int64_t>(a.kv_heads) * a.head_dim;
    int64_t first = row.visible;
    // slot_of block by block: one table lookup per block, not a division per position.
    for (int64_t j = from; j < row.visible;) {
        const int64_t b = j / a.block_size, end = std::min(row.visible, (b + 1) * a.block_size);
        const int32_t block = row.table[b];
        for (; j < end; ++j) {
            const int64_t slot = j < masked_before ? -1 : slot_in_block(a, block, j - b * a.block_size);
            offsets[j] = slot < 0 ? -1 : slot * kv_stride;
            if (slot >= 0 && first == row.visible) first = j;
        }
    }
    return first;
}

// Whether any of offsets[from, to) has a cache row.
bool any_key(const int64_t* offsets, int64_t from, int64_t to) {
    for (int64_t j = from; j < to; ++j)
        if (offsets[j] >= 0) return true;
    return false;
}

// Query rows [t0, t0 + nr) of one sequence for heads [h0, h0 + nh) of one kv head: one pass over its K rows and
// one over its V rows serve them all. offsets: cache_offsets of the sequence's last row, which sees the most
// positions, from the lane-aligned start of its first row on; each row masks the positions before its own start.
void run_tile(const F16AttentionArgs& f, float* ws, const int64_t* offsets, int64_t t0, int nr, int h0, int nh) {
    const PagedAttentionArgs& a = f.a;
    const F16AttentionKernels& k = *f.kernels;
    const int hd = a.head_dim, half = hd / 2;
    const int64_t kv_off = static_cast<int64_t>(h0 / (a.heads / a.kv_heads)) * hd;
    const int64_t scores_stride = scores_floats(static_cast<int64_t>(a.max_blocks) * a.block_size);
    float* p = ws + 2 * scores_stride;
    float* acc = p + kF16AttentionTile * scores_stride;
    float* qs = acc + kF16AttentionTile * 8 * static_cast<int64_t>(hd);
    int64_t counts[kF16AttentionTile], starts[kF16AttentionTile];
    float* outs[kF16AttentionTile];
    uint16_t q16[kMaxHeadDim];
    int nq = 0;
    const int64_t a0 = lane_aligned(query_row(a, t0).start);  // the tile's rows start no earlier than its first
    for (int64_t t = t0; t < t0 + nr; ++t) {
        const QueryRow row = query_row(a, t);
        const bool any = any_key(offsets, row.start, row.visible);
        for (int h = h0; h < h0 + nh; ++h) {
            float* out = a.out + (t * a.heads + h) * hd;
            if (!any) {  // nothing to attend to
                std::fill(out, out + hd, 0.0f);
                continue;
            }
            const float* q = a.q + (t * a.heads + h) * hd;
            float* qi = qs + static_cast<int64_t>(nq) * hd;
            for (int i = 0; i < half; ++i) {  // ggml's element order
                qi[2 * i] = f.interleaved ? q[i] : q[2 * i];
                qi[2 * i + 1] = f.interleaved ? q[half + i] : q[2 * i + 1];
            }
            k.to_f16(qi, q16, hd);
            row_to_f32(q16, DType::F16, hd, qi);  // exact, the same on every Isa
            counts[nq] = row.visible - a0;
            starts[nq] = row.start - a0;
            outs[nq++] = out;
        }
    }
    if (nq == 0) return;
    k.attend_tile(static_cast<const uint16_t*>(a.k_cache) + kv_off, static_cast<const uint16_t*>(a.v_cache) + kv_off,
                  offsets + a0, counts, starts, nq, qs, hd, f.interleaved, a.scale, p, scores_stride, acc);
    for (int i = 0; i < nq; ++i) reduce_lanes(acc + i * 8 * static_cast<int64_t>(hd), hd, 8, outs[i]);
}

// Which cache offsets a thread's workspace holds between the units it runs: a tiled sequence's (named by its first
// row) or an untiled row's.
struct HeldOffsets {
    int64_t sequence = -1;
    int64_t row = -1;
    bool any = false;  // the row's: whether it has a key to attend to
};

// Item (t, h) of a sequence in tiles: when row t starts a tile and head h starts a tile's query heads (of one kv
// head), that tile; otherwise nothing (the tile's first item computes it).
void tiled_item(const F16AttentionArgs& f, float* ws, HeldOffsets& held, const QueryRow& row, int64_t t, int h) {
    const PagedAttentionArgs& a = f.a;
    const int group = a.heads / a.kv_heads, g = h / group;
    const int tile_heads = std::min(group, kF16AttentionTile), tile_rows = kF16AttentionTile / tile_heads;
    if ((t - row.first) % tile_rows != 0 || (h - g * group) % tile_heads != 0) return;
    auto* offsets = reinterpret_cast<int64_t*>(ws);
    if (held.sequence != row.first) {
        const int64_t last = row.first + row.q_len - 1;
        cache_offsets(a, query_row(a, last), offsets, lane_aligned(query_row(a, row.first).start), 0);
        held = {row.first, -1, false};
    }
    run_tile(f, ws, offsets, t, static_cast<int>(std::min<int64_t>(tile_rows, row.first + row.q_len - t)), h,
             std::min(tile_heads, (g + 1) * group - h));
}

// Query heads [h, h + nq) of an untiled row t, all of one kv head and at most kGroup: each K and V row is loaded
// once for all of them.
void row_heads(const F16AttentionArgs& f, float* ws, HeldOffsets& held, const QueryRow& row, int64_t t, int h,
               int nq) {
    const PagedAttentionArgs& a = f.a;
    const F16AttentionKernels& k = *f.kernels;
    const int hd = a.head_dim, half = hd / 2;
    const int64_t scores_stride = scores_floats(static_cast<int64_t>(a.max_blocks) * a.block_size);
    auto* offsets = reinterpret_cast<int64_t*>(ws);  // the row's key/value offsets, -1 where masked
    float* p = ws + 2 * scores_stride;
    float* acc = p + kGroup * scores_stride;
    auto* q16 = reinterpret_cast<uint16_t*>(acc + kGroup * kMaxLanes * hd);
    const int64_t a0 = lane_aligned(row.start);
    if (held.row != t) {  // the heads of one row share its positions
        held = {-1, t, cache_offsets(a, row, offsets, a0, row.start) < row.visible};
    }
    float* out = a.out + (t * a.heads + h) * hd;
    if (!held.any) {
        std::fill(out, out + nq * hd, 0.0f);
        return;
    }
    for (int i = 0; i < nq; ++i) {
        const float* q = a.q + (t * a.heads + h + i) * hd;
        float q_ggml[kMaxHeadDim];
        if (f.interleaved) {  // q into ggml's element order, so that only k is read interleaved
            for (int e = 0; e < half; ++e) {
                q_ggml[2 * e] = q[e];
                q_ggml[2 * e + 1] = q[half + e];
            }
            q = q_ggml;
        }
        k.to_f16(q, q16 + i * hd, hd);
    }
    const bool batch = row.q_len >= 2;
    // tinyBLAS declines a dot whose length is not a multiple of 8.
    const GgmlDot kq_order = batch && hd % 8 == 0 ? GgmlDot::Tinyblas : GgmlDot::VecDot;
    const int64_t n = row.visible - a0;
    const int64_t kv_off = static_cast<int64_t>(h / (a.heads / a.kv_heads)) * hd;
    const auto* k_cache = static_cast<const uint16_t*>(a.k_cache);
    const auto* v_cache = static_cast<const uint16_t*>(a.v_cache);
    k.scores(k_cache + kv_off, offsets + a0, n, q16, nq, hd, kq_order, f.interleaved, p + a0, scores_stride);
    for (int i = 0; i < nq; ++i) k.soft_max(p + i * scores_stride + a0, n, a.scale);
    const int lanes = batch ? 8 : kMaxLanes;
    std::fill(acc, acc + static_cast<int64_t>(nq) * lanes * hd, 0.0f);
    k.accumulate(p + a0, scores_stride, nq, v_cache + kv_off, offsets + a0, n, lanes, acc, hd);
    for (int i = 0; i < nq; ++i) reduce_lanes(acc + static_cast<int64_t>(i) * lanes * hd, hd, lanes, out + i * hd);
}

}  // namespace

void paged_attention_f16_range(const F16AttentionArgs& f, int64_t begin, int64_t end, OpWorker worker) {
    const PagedAttentionArgs& a = f.a;
    float* ws = f.workspace + worker.index * f.workspace_floats;
    const int group = a.heads / a.kv_heads;
    HeldOffsets held;
    for (int64_t w = begin; w < end;) {
        const int64_t t = w / a.heads;
        const int h = static_cast<int>(w % a.heads);
        const QueryRow row = query_row(a, t);
        if (tiled(f, row.q_len)) {
            tiled_item(f, ws, held, row, t, h);
            ++w;
            continue;
        }
        const int nq = static_cast<int>(std::min<int64_t>({kGroup, (h / group + 1) * group - h, end - w}));
        row_heads(f, ws, held, row, t, h, nq);
        w += nq;
    }
}

}  // namespace tracelm::cpu
