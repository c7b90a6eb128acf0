#include "runtime/dtype.h"

namespace tracelm {

// Matches F16C (vcvtph2ps): signalling NaNs come back quietened, payload kept.
float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1fu) {
        u = sign | 0x7f800000u | (mant << 13);
        if (mant != 0) u |= 0x00400000u;
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (mant << 13);  // rebias 15 -> 127
    } else if (mant == 0) {
        u = sign;
    } else {
        // Subnormal half: normalise, since every half subnormal is a normal f32.
        exp = 113;  // f32 biased exponent of 2^-14
        while ((mant & 0x400u) == 0) {
            mant <<= 1;
            --exp;
        }
        u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even, overflow to inf, gradual underflow; NaNs are quietened with the top
// payload bits kept, as vcvtps2ph does.
uint16_t f32_to_f16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16, or inf
    if (abs >= 0x38800000u) {
        // Normal half range [2^-14, 2^16). A rounding carry may ripple into the exponent; from
        // 0x7bff that gives 0x7c00 = inf, which is the correct result for [65520, 2^16).
        uint32_t h = (abs >> 13) - (112u << 10);
        const uint32_t rem = abs & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
        return static_cast<uint16_t>(sign | h);
    }
    if (abs <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 itself is a tie to 0)
    // Subnormal half: the result counts units of 2^-24.
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | h);
}

}  // namespace tracelm
