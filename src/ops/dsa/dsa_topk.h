// DeepSeek sparse attention (DSA) top-k selection: the semantics every implementation follows, the
// argument checks they share, and host-side helpers that drive the op.
//
// dsa_topk(scores [T, nk] f32, window_start [T] i64, window_end [T] i64, topk) -> indices [T, topk] i64.
// For each row t the window is clamped to s0 = max(start, 0), s1 = min(end, nk), n = max(s1 - s0, 0):
//   - rank order is score descending, then key index ascending (the lower index wins a tie); NaN ranks
//     below every number including -inf; -0.0 and +0.0 are equal;
//   - n <= topk: every window key in ascending key order, then -1 padding;
//   - otherwise the topk best window keys, in ascending key order (not score order).
// topk <= 0, a negative nk or mismatched shapes are errors (std::invalid_argument) raised before anything is
// written. Nothing bounds topk or nk.
//
// dsa_topk_causal(scores, meta, ws, indices) is dsa_topk with the windows of a step's causal rows, taken from
// AttentionMeta on the device (so a captured step needs no host write): row t = query_start_loc[s] + i of sequence s
// has the window [0, seq_lens[s] - q_len + i + 1) with q_len = query_start_loc[s + 1] - query_start_loc[s]; a row
// of no sequence (a padded row) an empty one, so all -1.
//
// This header is also compiled by nvcc (the CUDA kernel uses order_key and row_window on the device).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/backend.h"
#include "runtime/host_device.h"

namespace tracelm::dsa {

// The clamped window of one row: keys [begin, begin + size).
struct KeyWindow {
    int64_t begin;
    int64_t size;
};

TRACELM_HD constexpr KeyWindow clamp_window(int64_t start, int64_t end, int64_t keys) {
    const int64_t s0 = start > 0 ? start : 0;
    const int64_t s1 = end < keys ? end : keys;
    // The end is raised to the start before subtracting, so no subtraction can overflow (for windows such as
    // [18, INT64_MIN)). `s1 > s0 ? s1 - s0 : 0` is not enough: signed overflow being undefined, nvcc compiles it to
    // max(s1 - s0, 0), which wraps to a huge size (an out-of-bounds read on the GPU).
    const int64_t e = s1 > s0 ? s1 : s0;
    return {s0, e - s0};
}

TRACELM_HD inline uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t b;
    std::memcpy(&b, &x, sizeof(b));
    return b;
#endif
}

// Order-preserving unsigned key: score a ranks above score b exactly when order_key(a) > order_key(b), so
// selection can count and compare integers. Every NaN maps to 0, below -inf (0x007fffff); -0.0 maps with +0.0.
TRACELM_HD inline uint32_t order_key(float x) {
    uint32_t b = float_bits(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0;
    if (b == 0x80000000u) b = 0;
    // Negative floats grow as their magnitude does, so their bits are inverted; positive ones are lifted
    // above all of them by setting the top bit.
    return b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) | 0x80000000u);
}

// The i32 arrays of AttentionMeta that place a step's query rows in their sequences.
struct CausalRows {
    const int32_t* query_start = nullptr;  // [num_seqs + 1]
    const int32_t* seq_lens = nullptr;     // [num_seqs]
    int num_seqs = 0;
};

// Row t's sequence (-1: none) and the end of its causal window, seq_len - q_len + i + 1 (0 for no sequence).
struct CausalRow {
    int seq;
    int64_t end;
};
TRACELM_HD inline CausalRow causal_row(const CausalRows& c, int64_t t) {
    // A scan: a step has few sequences.
    for (int s = 0; s < c.num_seqs; ++s) {
        const int64_t q0 = c.query_start[s], q1 = c.query_start[s + 1];
        if (q0 <= t && t < q1) return {s, static_cast<int64_t>(c.seq_lens[s]) - (q1 - q0) + (t - q0) + 1};
    }
    return {-1, 0};
}

// Row r's clamped window: the causal one when c.query_start is set (dsa_topk_causal), else [start[r], end[r]).
TRACELM_HD inline KeyWindow row_window(const int64_t* start, const int64_t* end, const CausalRows& c, int64_t r,
                                       int64_t keys) {
    return c.query_start != nullptr ? clamp_window(0, causal_row(c, r).end, keys)
                                    : clamp_window(start[r], end[r], keys);
}

// Bytes of rows x cols elements of `elem` bytes; std::invalid_argument when a count is negative or the
// product overflows.
size_t array_bytes(int64_t rows, int64_t cols, size_t elem);

// Throws std::invalid_argument ("dsa_topk: ...") unless rows >= 0, keys >= 0, topk > 0 and there is one
// window start and one window end per row.
void check_topk_args(int64_t rows, int64_t keys, int64_t topk, int64_t window_starts, int64_t window_ends);
// The same for device tensors: scores [T, nk] f32, window_start / window_end of T i64 elements (any 2-D
// shape), indices [T, topk] i64 (topk = indices.cols).
void check_topk_args(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                     const Tensor& indices);
// dsa_topk_causal's: scores [T, nk] f32, indices [T, topk] i64, meta as attention's (ops/attention) without a
// sliding window.
void check_topk_causal_args(const Tensor& scores, const AttentionMeta& meta, const Tensor& indices);
// Throws std::invalid_argument unless `ws` holds at least `bytes` and was made for at least rows x keys.
void check_topk_workspace(const DsaTopkWorkspace& ws, int64_t rows, int64_t keys, size_t bytes);

// The workspace Backend::dsa_topk needs for up to max_rows rows of max_keys keys, allocated once (and so,
// like every allocation, outside capture).
DsaTopkWorkspace make_topk_workspace(Backend& backend, int64_t max_rows, int64_t max_keys);

// One call on host data, as the CLI reads it and the tests and fuzzer generate it.
struct TopkCase {
    int64_t rows = 0;
    int64_t keys = 0;
    int64_t topk = 0;
    std::vector<float> scores;  // rows x keys, row-major
    std::vector<int64_t> window_start, window_end;
};

// check_topk_args plus scores holding exactly rows x keys values.
void check_case(const TopkCase& c);

// The reference implementation: sorts each row's window by rank. Returns rows x topk indices.
std::vector<int64_t> topk_reference(const TopkCase& c);
// dsa_topk_causal's reference: topk_reference with each row's causal window worked out on the host from a step's
// query_start_loc [num_seqs + 1] and seq_lens [num_seqs] (c's windows are ignored).
std::vector<int64_t> topk_causal_reference(TopkCase c, const std::vector<int32_t>& query_start_loc,
                                           const std::vector<int32_t>& seq_lens);

// Runs Backend::dsa_topk on host cases: device buffers and the workspace for cases of up to the given sizes
// are allocated once, so each run() only uploads, records or dispatches one op, and downloads.
class TopkRunner {
   public:
    TopkRunner(Backend& backend, int64_t max_rows, int64_t max_keys, int64_t max_topk);
    ~TopkRunner();
    TopkRunner(const TopkRunner&) = delete;
    TopkRunner& operator=(const TopkRunner&) = delete;

    // rows x topk indices; std::invalid_argument for an invalid case or one beyond the sizes above.
    std::vector<int64_t> run(const TopkCase& c);

   private:
    Backend& backend_;
    int64_t max_rows_, max_keys_, max_topk_;
    Buffer* scores_ = nullptr;
    Buffer* window_start_ = nullptr;
    Buffer* window_end_ = nullptr;
    Buffer* indices_ = nullptr;
    DsaTopkWorkspace workspace_;
};

}  // namespace tracelm::dsa
