// Shared by the quantized-weight kernels (quant_*.cpp): the GGML block layouts (ggml-common.h) and the blocks
// activations are quantized into. Types only, no functions, since the ISA files may not call shared inline
// code (see kernels_internal.h). Every field is bytes, so blocks need no alignment; f16 scales are read with
// memcpy.
//
// Every output is the same sum in every implementation: acc = 0.0f, then for each weight block in k order
// acc += (d * dx) * float(isum) [+ (m * dx) * float(msum)], and finally + bias. isum is the exact integer dot
// product of the block's integer weights (offsets such as Q4_0's -8 applied) with the activation's int8
// values, scaled by the sub-block scales for the K types; d, m, msum per type:
//   Q8_0, Q4_0, Q5_0: d;                    no m term
//   Q4_1, Q5_1:       d, m = the block's m; msum = the activation block's sum of int8 values
//   Q4_K, Q5_K:       d, m = -dmin;        msum = sum over sub-blocks j of min_j * (activation sum over j)
//   Q6_K:             d;                    no m term
// Integer sums are exact, so SIMD code may add them in any order; only the float operations above are fixed
// (as plain multiplies and adds, never fused).
#pragma once

#include <cstdint>

namespace tracelm::cpu::quant {

// ---- weights (GGML) ----
struct BlockQ8_0 {
    uint8_t d[2];  // f16
    int8_t qs[32];
};
// Element j < 16 is the low nibble of qs[j], element j + 16 its high nibble; value d * (q - 8).
struct BlockQ4_0 {
    uint8_t d[2];
    uint8_t qs[16];
};
// As Q4_0 with value d * q + m.
struct BlockQ4_1 {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qs[16];
};
// As Q4_0 plus bit j of the little-endian qh as bit 4 of element j; value d * (q - 16).
struct BlockQ5_0 {
    uint8_t d[2];
    uint8_t qh[4];
    uint8_t qs[16];
};
// As Q5_0 with value d * q + m.
struct BlockQ5_1 {
    uint8_t d[2];
    uint8_t m[2];
    uint8_t qh[4];
    uint8_t qs[16];
};
// 8 sub-blocks of 32 with 6-bit scales sc_j and mins m_j packed in `scales` (GGML's get_scale_min_k4); 64
// elements per 32 bytes of qs: sub-block 2i in the low nibbles, 2i+1 in the high ones. Value
// (d * sc_j) * q - dmin * m_j.
struct BlockQ4_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];
    uint8_t qs[128];
};
// As Q4_K plus bit j of qh[l] as bit 4 of element l of sub-block j.
struct BlockQ5_K {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
// Two halves of 128 elements, each from 64 bytes of ql and 32 of qh: element 32c + l (c = 0..3, l < 32) has
// low bits from ql[32 (c & 1) + l] (low nibble for c < 2, high for c >= 2) and high 2 bits from bits 2c, 2c+1
// of qh[l]. Value (d * scales[i / 16]) * (q - 32).
struct BlockQ6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint8_t d[2];
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
              sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// ---- activations ----
// d = max|x| / 127, q = round-to-nearest-even(x * (1 / d)) (0 when d = 0); sums are of the q.
struct ActBlock32 {
    float d;
    int32_t sum;
    int8_t q[32];
};
struct ActBlock256 {
    float d;
    int16_t bsums[16];  // sum of each 16 consecutive q
    int8_t q[256];
};

static_assert(sizeof(ActBlock32) == 40 && sizeof(ActBlock256) == 292);

}  // namespace tracelm::cpu::quant
