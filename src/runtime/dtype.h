// Element types understood by every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tracelm {

// Plain element types, then the GGML block-quantized weight types (layouts in ggml's ggml-common.h:
// a block of 32 or 256 elements stored as scales plus packed integers). Quantized tensors are only ever
// weights, stored row-major with each row a whole number of blocks. The _R16 types hold the same blocks
// repacked at load for the fast numerics (formats/repack.h): groups of 16 rows interleaved, so the bytes of one
// row are no longer contiguous.
enum class DType : uint8_t {
    F32, BF16, F16, I32, I64, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_0_R16, Q4_0_R16, Q4_1_R16, Q5_0_R16,
    Q5_1_R16, Q4_K_R16, Q5_K_R16, Q6_K_R16
};

constexpr bool dtype_is_quantized(DType t) { return static_cast<uint8_t>(t) >= static_cast<uint8_t>(DType::Q8_0); }
constexpr bool dtype_is_repacked(DType t) { return static_cast<uint8_t>(t) >= static_cast<uint8_t>(DType::Q8_0_R16); }

// The GGML type whose blocks a repacked type holds, and the repacked type of a GGML type (each: t itself where
// there is none).
constexpr DType dtype_unpacked(DType t) {
    switch (t) {
        case DType::Q8_0_R16: return DType::Q8_0;
        case DType::Q4_0_R16: return DType::Q4_0;
        case DType::Q4_1_R16: return DType::Q4_1;
        case DType::Q5_0_R16: return DType::Q5_0;
        case DType::Q5_1_R16: return DType::Q5_1;
        case DType::Q4_K_R16: return DType::Q4_K;
        case DType::Q5_K_R16: return DType::Q5_K;
        case DType::Q6_K_R16: return DType::Q6_K;
        default: return t;
    }
}
constexpr DType dtype_repacked(DType t) {
    switch (t) {
        case DType::Q8_0: return DType::Q8_0_R16;
        case DType::Q4_0: return DType::Q4_0_R16;
        case DType::Q4_1: return DType::Q4_1_R16;
        case DType::Q5_0: return DType::Q5_0_R16;
        case DType::Q5_1: return DType::Q5_1_R16;
        case DType::Q4_K: return DType::Q4_K_R16;
        case DType::Q5_K: return DType::Q5_K_R16;
        case DType::Q6_K: return DType::Q6_K_R16;
        default: return t;
    }
}

// Elements per block: 1 for plain types.
constexpr int64_t dtype_block_elems(DType t) {
    switch (dtype_unpacked(t)) {
        case DType::Q8_0:
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q5_0:
        case DType::Q5_1: return 32;
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K: return 256;
        default: return 1;
    }
}

// Bytes per block (for plain types: bytes per element).
constexpr size_t dtype_block_bytes(DType t) {
    switch (dtype_unpacked(t)) {
        case DType::F32: return 4;
        case DType::BF16: return 2;
        case DType::F16: return 2;
        case DType::I32: return 4;
        case DType::I64: return 8;
        case DType::Q8_0: return 34;   // f16 d, 32 x i8
        case DType::Q4_0: return 18;   // f16 d, 16 bytes of nibbles
        case DType::Q4_1: return 20;   // f16 d, f16 m, 16 bytes of nibbles
        case DType::Q5_0: return 22;   // f16 d, 4 bytes of high bits, 16 bytes of nibbles
        case DType::Q5_1: return 24;   // f16 d, f16 m, 4 bytes of high bits, 16 bytes of nibbles
        case DType::Q4_K: return 144;  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
        case DType::Q5_K: return 176;  // as Q4_K plus 32 bytes of high bits
        case DType::Q6_K: return 210;  // 128 bytes low nibbles, 64 bytes high 2 bits, 16 x i8 scales, f16 d
        default: break;
    }
    return 0;
}

// Bytes per element of a plain type; 0 for quantized types (use dtype_row_bytes).
constexpr size_t dtype_size(DType t) { return dtype_is_quantized(t) ? 0 : dtype_block_bytes(t); }

// Bytes of `cols` consecutive elements; for quantized types cols must be a multiple of the block
// (dtype_row_ok).
constexpr size_t dtype_row_bytes(DType t, int64_t cols) {
    return static_cast<size_t>(cols / dtype_block_elems(t)) * dtype_block_bytes(t);
}
constexpr bool dtype_row_ok(DType t, int64_t cols) { return cols >= 0 && cols % dtype_block_elems(t) == 0; }

// llama.cpp's CPU MUL_MAT sums the K types' products of at least this many activation rows in its tiled kernel's
// order, fewer in ggml_vec_dot's (docs/ggml-numerics.md): how many rows a prompt forward has matters to the bits.
inline constexpr int64_t kGgmlTiledMinRows = 8;
// The types (GGML's own layouts, not repacked ones) whose llama.cpp products of kGgmlTiledMinRows rows or more sum in
// the tiled order.
constexpr bool ggml_has_tiled_order(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

constexpr std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::F32: return "f32";
        case DType::BF16: return "bf16";
        case DType::F16: return "f16";
        case DType::I32: return "i32";
        case DType::I64: return "i64";
        case DType::Q8_0: return "q8_0";
        case DType::Q4_0: return "q4_0";
        case DType::Q4_1: return "q4_1";
        case DType::Q5_0: return "q5_0";
        case DType::Q5_1: return "q5_1";
        case DType::Q4_K: return "q4_k";
        case DType::Q5_K: return "q5_k";
        case DType::Q6_K: return "q6_k";
        case DType::Q8_0_R16: return "q8_0_r16";
        case DType::Q4_0_R16: return "q4_0_r16";
        case DType::Q4_1_R16: return "q4_1_r16";
        case DType::Q5_0_R16: return "q5_0_r16";
        case DType::Q5_1_R16: return "q5_1_r16";
        case DType::Q4_K_R16: return "q4_k_r16";
        case DType::Q5_K_R16: return "q5_k_r16";
        case DType::Q6_K_R16: return "q6_k_r16";
    }
    return "?";
}

// Scalar conversions (the reference semantics; SIMD kernels must agree bit for bit).
inline float bf16_to_f32(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even; NaN stays NaN (quietened).
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace tracelm
