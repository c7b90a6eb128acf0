// Per-instruction-set primitives of the fast dsa_topk kernel; shared between dsa_topk_cpu.cpp and
// dsa_topk_avx2.cpp only. As with the matmul kernels (backends/cpu/kernels/kernels_internal.h), the ISA file
// keeps everything at internal linkage and calls no inline function from a shared header.
#pragma once

#include <cstdint>

namespace tracelm::dsa::detail {

struct TopkPrimitives {
    // keys[i] = order_key(x[i]) for i in [0, n).
    void (*order_keys)(const float* x, int64_t n, uint32_t* keys);
    // Copies to dst, in order, the keys k of src[0, n) with k >> shift == prefix; returns how many. dst may be
    // src (each key is written at or before where it was read).
    int64_t (*compact)(const uint32_t* src, int64_t n, int shift, uint32_t prefix, uint32_t* dst);
    // Writes base + i, ascending, for every i in [0, n) with keys[i] > threshold and for the first take_equal
    // with keys[i] == threshold; stops after `total` (their number).
    void (*emit)(const uint32_t* keys, int64_t n, uint32_t threshold, int64_t take_equal, int64_t total, int64_t base,
                 int64_t* out);
};

extern const TopkPrimitives portable_topk;
extern const TopkPrimitives avx2_topk;

}  // namespace tracelm::dsa::detail
