// Shared by the shaders: exact conversions between f32 and the 16-bit float types, done on the bits so that they do
// not depend on how a driver converts (flushing f16 subnormals, say) and equal the CPU backend's bit for bit.
#extension GL_EXT_control_flow_attributes : enable

// Weight types, as the C++ side passes them in the WTYPE specialisation constant (vulkan_backend.cpp: weight_code).
#define WTYPE_F32 0u
#define WTYPE_F16 1u
#define WTYPE_BF16 2u
#define WTYPE_Q8_0 3u
#define WTYPE_Q4_0 4u
#define WTYPE_Q4_1 5u
#define WTYPE_Q5_0 6u
#define WTYPE_Q5_1 7u
#define WTYPE_Q4_K 8u
#define WTYPE_Q5_K 9u
#define WTYPE_Q6_K 10u

// Workgroup index over x and y, for dispatches too large for x alone (vulkan_backend.cpp: groups()).
uint group_index() { return gl_WorkGroupID.y * 65535u + gl_WorkGroupID.x; }

float f16_bits_to_f32(uint h) {
    const uint sign = (h & 0x8000u) << 16;
    const uint e = (h >> 10) & 0x1fu;
    const uint m = h & 0x3ffu;
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24, exact in f32.
        const float v = float(m) * 5.9604644775390625e-8;
        return sign != 0u ? -v : v;
    }
    if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

float bf16_bits_to_f32(uint h) { return uintBitsToFloat(h << 16); }

// a / b rounded once, as the CPU's division (Vulkan allows 2.5 ulp), through f64: 53 bits hold a correctly rounded
// f32 quotient. An f32 quotient corrected by its fma remainder was still an ulp off at times on lavapipe. Needs
// shaderFloat64, so a macro: only the shaders that divide this way declare f64.
#define div_rn64(a, b) float(double(a) / double(b))

// f32 to f16 bits, rounded to nearest even (the CPU backend's f32_to_f16).
uint f32_to_f16_bits(float f) {
    const uint x = floatBitsToUint(f);
    const uint sign = (x >> 16) & 0x8000u;
    const uint ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u;  // NaN
    if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity
    if (ax < 0x38800000u) {
        // f16 subnormal or zero: the value in units of 2^-24, rounded to nearest even.
        if (ax < 0x33000000u) return sign;  // below half the smallest subnormal
        const uint e = ax >> 23;
        const uint m = (ax & 0x7fffffu) | 0x800000u;
        const uint shift = 126u - e;  // m * 2^(e-150) / 2^-24 = m >> (126 - e)
        uint r = m >> shift;
        const uint rest = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1u);
        if (rest > half_ulp || (rest == half_ulp && (r & 1u) != 0u)) r += 1u;
        return sign | r;
    }
    uint r = ((ax >> 13) - (112u << 10));
    const uint rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u) != 0u)) r += 1u;
    return sign | r;
}

// The 16-bit half `i` of a uint array.
#define HALF_OF(arr, i) ((((i) & 1u) != 0u) ? (arr[(i) >> 1] >> 16) : (arr[(i) >> 1] & 0xffffu))

// Element i of a weight row (f32, f16 or bf16 by wtype) that starts at 16-bit half `base` of the uint array arr.
#define WEIGHT_AT(arr, wtype, base, i)                                                   \
    ((wtype) == WTYPE_F32   ? uintBitsToFloat(arr[((base) >> 1) + (i)])                 \
     : (wtype) == WTYPE_F16 ? f16_bits_to_f32(HALF_OF(arr, (base) + (i)))               \
                            : bf16_bits_to_f32(HALF_OF(arr, (base) + (i))))

// Byte a of a uint array.
#define BYTE_AT(arr, a) ((arr[(a) >> 2] >> (((a) & 3u) * 8u)) & 0xffu)

// GGML's 32-element blocks (formats/ggml_blocks.h) at byte `block` of a uint array: f16 d, then Q4_1 / Q5_1 an f16 m,
// Q5_0 / Q5_1 32 high bits qh, then the quants: Q8_0 32 x i8; the others 16 bytes, element j < 16 the low nibble of
// byte j and j + 16 its high nibble, bit e of the little-endian qh as bit 4 of element e (Q5), less 8 (Q4_0) or 16
// (Q5_0). The value is d * q (+ m).
uint block_bytes(uint t) { return t == WTYPE_Q8_0 ? 34u : t == WTYPE_Q4_0 ? 18u : t == WTYPE_Q4_1 ? 20u : t == WTYPE_Q5_0 ? 22u : 24u; }
bool block_has_m(uint t) { return t == WTYPE_Q4_1 || t == WTYPE_Q5_1; }
uint block_qs(uint t) { return t == WTYPE_Q8_0 || t == WTYPE_Q4_0 ? 2u : t == WTYPE_Q4_1 ? 4u : t == WTYPE_Q5_0 ? 6u : 8u; }

#define BLOCK_D(arr, block) f16_bits_to_f32(BYTE_AT(arr, (block)) | (BYTE_AT(arr, (block) + 1u) << 8))
#define BLOCK_M(arr, block) BLOCK_D(arr, (block) + 2u)
// The integer of element e (0..31) of a block of type t.
#define BLOCK_Q(arr, t, block, e)                                                                              \
    ((t) == WTYPE_Q8_0                                                                                         \
         ? (int(BYTE_AT(arr, (block) + 2u + (e)) << 24) >> 24)                                                 \
         : int(((e) < 16u ? BYTE_AT(arr, (block) + block_qs(t) + (e)) & 15u                                    \
                          : BYTE_AT(arr, (block) + block_qs(t) + (e) - 16u) >> 4) |                            \
               ((t) == WTYPE_Q5_0 || (t) == WTYPE_Q5_1                                                         \
                    ? ((BYTE_AT(arr, (block) + ((t) == WTYPE_Q5_0 ? 2u : 4u) + (e) / 8u) >> ((e) % 8u)) & 1u) << 4 \
                    : 0u)) -                                                                                   \
               ((t) == WTYPE_Q4_0 ? 8 : (t) == WTYPE_Q5_0 ? 16 : 0))

// GGML's 256-element blocks (formats/ggml_blocks.h) at byte `block` of a uint array. Q4_K / Q5_K: f16 d, f16 dmin
// (BLOCK_D, BLOCK_M), 12 bytes of 6-bit scales and mins, Q5_K 32 bytes qh, then 128 bytes qs; element 32j + l is a
// nibble of qs[32 (j / 2) + l] (low for even j), Q5_K with bit j of qh[l] as bit 4. Q6_K: ql[128], qh[64], int8
// scales[16], f16 d; element 128h + 32c + l is a nibble of ql[64h + 32 (c & 1) + l] (low for c < 2) with bits 2c, 2c+1
// of qh[32h + l] as bits 4, 5. The integers here are unsigned (Q6_K's offset of 32 not taken out).
uint kblock_bytes(uint t) { return t == WTYPE_Q4_K ? 144u : t == WTYPE_Q5_K ? 176u : 210u; }
#define K45_Q(arr, t, block, e)                                                                                   \
    int(((((e) >> 5) & 1u) == 0u                                                                                  \
             ? BYTE_AT(arr, (block) + ((t) == WTYPE_Q5_K ? 48u : 16u) + 32u * ((e) >> 6) + ((e) & 31u)) & 15u     \
             : BYTE_AT(arr, (block) + ((t) == WTYPE_Q5_K ? 48u : 16u) + 32u * ((e) >> 6) + ((e) & 31u)) >> 4) |   \
        ((t) == WTYPE_Q5_K ? ((BYTE_AT(arr, (block) + 16u + ((e) & 31u)) >> ((e) >> 5)) & 1u) << 4 : 0u))
// GGML's get_scale_min_k4: the 6-bit scale and min of sub-block j.
#define K_SB(arr, block, i) BYTE_AT(arr, (block) + 4u + (i))
#define K_SC(arr, block, j)                                  \
    int((j) < 4u ? K_SB(arr, block, j) & 63u                 \
                 : (K_SB(arr, block, (j) + 4u) & 15u) | ((K_SB(arr, block, (j) - 4u) >> 6) << 4))
#define K_MIN(arr, block, j)                                 \
    int((j) < 4u ? K_SB(arr, block, (j) + 4u) & 63u         \
                 : (K_SB(arr, block, (j) + 4u) >> 4) | ((K_SB(arr, block, j) >> 6) << 4))
#define Q6K_LO(arr, block, e) BYTE_AT(arr, (block) + 64u * ((e) >> 7) + 32u * (((e) >> 5) & 1u) + ((e) & 31u))
#define Q6K_Q(arr, block, e)                                                                                  \
    int(((((e) >> 5) & 3u) < 2u ? Q6K_LO(arr, block, e) & 15u : Q6K_LO(arr, block, e) >> 4) |                  \
        (((BYTE_AT(arr, (block) + 128u + 32u * ((e) >> 7) + ((e) & 31u)) >> (2u * (((e) >> 5) & 3u))) & 3u) << 4))
#define Q6K_SCALE(arr, block, s) (int(BYTE_AT(arr, (block) + 192u + (s)) << 24) >> 24)
#define Q6K_D(arr, block) BLOCK_D(arr, (block) + 208u)
