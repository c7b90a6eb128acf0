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

// a / b rounded once, as the CPU's division: Vulkan allows division 2.5 ulp of error, and one correction by the exact
// remainder (an fma) brings it back.
float div_rn(float a, float b) {
    precise float q = a / b;
    precise float r = fma(-q, b, a);
    precise float c = q + r / b;
    return c;
}

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
