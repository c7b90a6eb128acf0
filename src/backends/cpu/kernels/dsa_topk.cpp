#include "backends/cpu/kernels/dsa_topk.h"

#include <algorithm>

#include "ops/dsa/dsa_topk.h"
#include "backends/cpu/kernels/dsa_topk_internal.h"

namespace tracelm::dsa {

namespace {

void order_keys(const float* x, int64_t n, uint32_t* keys) {
    for (int64_t i = 0; i < n; ++i) keys[i] = order_key(x[i]);
}

int64_t compact(const uint32_t* src, int64_t n, int shift, uint32_t prefix, uint32_t* dst) {
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (src[i] >> shift == prefix) dst[kept++] = src[i];
    }
    return kept;
}

void emit(const uint32_t* keys, int64_t n, uint32_t threshold, int64_t take_equal, int64_t total, int64_t base,
          int64_t* out) {
    int64_t written = 0;
    for (int64_t i = 0; i < n && written < total; ++i) {
        if (keys[i] > threshold) {
            out[written++] = base + i;
        } else if (keys[i] == threshold && take_equal > 0) {
            out[written++] = base + i;
            --take_equal;
        }
    }
}

const detail::TopkPrimitives& primitives(cpu::Isa isa) {
    return isa == cpu::Isa::Portable ? detail::portable_topk : detail::avx2_topk;
}

// The topk-th best key of a window (topk < n) and how many keys equal to it are selected: the keys above
// it number topk - take_equal.
struct Threshold {
    uint32_t key;
    int64_t take_equal;
};

Threshold select_threshold(const uint32_t* keys, int64_t n, int64_t topk, uint32_t* candidates,
                           const detail::TopkPrimitives& p) {
    constexpr int kPasses = 3;
    constexpr int kShift[kPasses] = {21, 10, 0};
    constexpr int kBits[kPasses] = {11, 11, 10};
    int64_t hist[int64_t{1} << 11];
    const uint32_t* src = keys;
    int64_t m = n;         // keys that share the digits chosen so far (src[0, m))
    int64_t need = topk;   // how many of them are still to be selected; 1 <= need <= m
    uint32_t prefix = 0;
    for (int pass = 0; pass < kPasses; ++pass) {
        const uint32_t bins = 1u << kBits[pass];
        std::fill(hist, hist + bins, 0);
        for (int64_t i = 0; i < m; ++i) ++hist[(src[i] >> kShift[pass]) & (bins - 1)];
        // From the best digit down: the bin holding the need-th best key.
        uint32_t digit = bins - 1;
        while (hist[digit] < need) need -= hist[digit--];
        prefix |= digit << kShift[pass];
        // Keep only that bin's keys: not after the last pass, nor when every key is in it.
        if (pass + 1 < kPasses && hist[digit] != m) {
            m = p.compact(src, m, kShift[pass], prefix >> kShift[pass], candidates);
            src = candidates;
        }
    }
    return {prefix, need};
}

void topk_row(const TopkCpuArgs& a, int64_t r, uint32_t* scratch, const detail::TopkPrimitives& p) {
    const KeyWindow w = row_window(a.window_start, a.window_end, a.causal, r, a.keys);
    int64_t* out = a.indices + r * a.topk;
    if (w.size <= a.topk) {
        for (int64_t i = 0; i < w.size; ++i) out[i] = w.begin + i;
        std::fill(out + w.size, out + a.topk, int64_t{-1});
        return;
    }
    uint32_t* keys = scratch;
    p.order_keys(a.scores + r * a.keys + w.begin, w.size, keys);
    const Threshold t = select_threshold(keys, w.size, a.topk, scratch + w.size, p);
    p.emit(keys, w.size, t.key, t.take_equal, a.topk, w.begin, out);
}

}  // namespace

const detail::TopkPrimitives detail::portable_topk = {order_keys, compact, emit};

void topk_cpu_range(const TopkCpuArgs& a, int64_t begin, int64_t end) {
    const detail::TopkPrimitives& p = primitives(a.isa);
    for (int64_t slot = begin; slot < end; ++slot) {
        uint32_t* scratch = a.scratch + slot * a.slot_stride;
        const int64_t r1 = a.rows * (slot + 1) / a.slots;
        for (int64_t r = a.rows * slot / a.slots; r < r1; ++r) topk_row(a, r, scratch, p);
    }
}

}  // namespace tracelm::dsa
