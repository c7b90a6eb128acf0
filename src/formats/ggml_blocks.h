// The GGML quantized block layouts (ggml-common.h) as GGUF files store them. Weight fields are bytes, so blocks
// need no alignment; f16 scales are read with memcpy.
#pragma once

#include <cstdint>

namespace tracelm::ggml {

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

}  // namespace tracelm::ggml
