// f16 <-> f32 conversions against exact values and an independent nearest-even reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "checkpoint/rng.h"
#include "runtime/dtype.h"

namespace tracelm {
namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Value of a non-negative finite half (0x7c00 gives 2^16, the rounding boundary past the largest).
double half_value(uint32_t h) {
    const uint32_t e = h >> 10, m = h & 0x3ffu;
    return e == 0 ? std::ldexp(static_cast<double>(m), -24) : std::ldexp(static_cast<double>(1024 + m), static_cast<int>(e) - 25);
}

// Nearest-even by search over the half grid, in exact double arithmetic.
uint16_t reference_f32_to_f16(float f) {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= 65520.0) return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7c00;  // invariant: half_value(lo) <= a < half_value(hi)
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        (half_value(mid) <= a ? lo : hi) = mid;
    }
    const double dl = a - half_value(lo), dh = half_value(hi) - a;
    const uint32_t r = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return static_cast<uint16_t>(sign | r);
}

TEST(DTypeF16, KnownValuesConvertToTheirExactBitsBothWays) {
    EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
    EXPECT_EQ(f32_to_f16(0.5f), 0x3800);
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);                 // largest half
    EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);               // just below the overflow tie
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                 // tie rounds to even = inf
    EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
    EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);    // smallest normal
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);    // smallest subnormal
    EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff); // largest subnormal
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);    // tie between 0 and 2^-24 -> even
    EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
    EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);    // 1.5 units -> 2
    EXPECT_EQ(f32_to_f16(std::ldexp(5.0f, -25)), 0x0002);    // 2.5 units -> 2
    EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400); // 1023.5 units carry into the normals
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);                        // tie -> even
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);                        // tie -> even
    EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);  // above tie
    EXPECT_EQ(f32_to_f16(1.0f / 3.0f), 0x3555);
    EXPECT_EQ(f32_to_f16(0.1f), 0x2e66);
    EXPECT_EQ(f32_to_f16(3.14159265f), 0x4248);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
    EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::denorm_min()), 0x8000);

    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
    EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
    EXPECT_EQ(bits(f16_to_f32(0x8000)), 0x80000000u);
    EXPECT_EQ(bits(f16_to_f32(0x7c00)), 0x7f800000u);
    EXPECT_EQ(bits(f16_to_f32(0xfc00)), 0xff800000u);
    EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
}

TEST(DTypeF16, NaNsStayNaNAndAreQuietened) {
    EXPECT_EQ(bits(f16_to_f32(0x7e00)), 0x7fc00000u);
    EXPECT_EQ(bits(f16_to_f32(0x7c01)), 0x7fc02000u);  // signalling -> quiet, payload kept
    EXPECT_EQ(bits(f16_to_f32(0xfd23)), 0xffe46000u);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
    EXPECT_EQ(f32_to_f16(from_bits(0x7f800001u)), 0x7e00);  // payload below half precision
    EXPECT_EQ(f32_to_f16(from_bits(0xff802000u)), 0xfe01);
    EXPECT_EQ(f32_to_f16(from_bits(0x7fffffffu)), 0x7fff);
}

TEST(DTypeF16, EveryHalfMatchesItsDefinitionAndRoundTrips) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = f16_to_f32(static_cast<uint16_t>(h));
        const uint32_t mag = h & 0x7fffu;
        if (mag > 0x7c00u) {
            ASSERT_TRUE(std::isnan(f)) << std::hex << h;
            ASSERT_EQ(f32_to_f16(f), h | 0x0200u) << std::hex << h;
            continue;
        }
        const double expect = (h & 0x8000u ? -1.0 : 1.0) *
                              (mag == 0x7c00u ? std::numeric_limits<double>::infinity() : half_value(mag));
        ASSERT_EQ(static_cast<double>(f), expect) << std::hex << h;
        ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
        ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
    }
}

TEST(DTypeF16, RoundingMatchesReferenceAtEveryTieAndItsNeighbours) {
    for (uint32_t h = 0; h < 0x7c00; ++h) {
        // Midpoints between adjacent halves are exact in f32 (11 significant bits + 1).
        const auto mid = static_cast<float>((half_value(h) + half_value(h + 1)) / 2);
        for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
            ASSERT_EQ(f32_to_f16(x), reference_f32_to_f16(x)) << x;
            ASSERT_EQ(f32_to_f16(-x), reference_f32_to_f16(-x)) << x;
        }
    }
}

TEST(DTypeF16, RoundingMatchesReferenceOnRandomBitPatterns) {
    Xoshiro256 rng(42);
    for (int i = 0; i < 1000000; ++i) {
        const float x = from_bits(static_cast<uint32_t>(rng.next() >> 32));
        if (std::isnan(x)) continue;
        ASSERT_EQ(f32_to_f16(x), reference_f32_to_f16(x)) << std::hex << bits(x);
    }
    // Dense near the subnormal/normal boundary, where the two code paths meet.
    for (uint32_t u = 0x33000000u - 4096; u < 0x38800000u + 4096; u += 97) {
        ASSERT_EQ(f32_to_f16(from_bits(u)), reference_f32_to_f16(from_bits(u))) << std::hex << u;
    }
}

}  // namespace
}  // namespace tracelm
