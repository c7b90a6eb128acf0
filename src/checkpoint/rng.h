// Deterministic integer PRNGs. Everything derived from them must use integer arithmetic and
// exactly-rounded float ops only, so that random checkpoints are identical across machines.
#pragma once

#include <cstdint>
#include <string_view>

namespace tracelm {

// splitmix64 (Steele, Lea, Flood); used to expand seeds.
class SplitMix64 {
   public:
    explicit SplitMix64(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

   private:
    uint64_t state_;
};

// xoshiro256** (Blackman, Vigna), seeded through splitmix64 as its authors recommend.
class Xoshiro256 {
   public:
    explicit Xoshiro256(uint64_t seed) {
        SplitMix64 sm(seed);
        for (auto& w : s_) w = sm.next();
    }
    uint64_t next() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    // Uniform in [-1, 1) on a grid of 2^-23: an exact int->float conversion times a power of two.
    float uniform_pm1() {
        const auto k = static_cast<int32_t>(next() >> 40) - (1 << 23);
        return static_cast<float>(k) * (1.0f / 8388608.0f);
    }
    // Uniform integer in [0, n), by multiply-shift (no division, no libm).
    uint32_t below(uint32_t n) { return static_cast<uint32_t>(((next() >> 32) * n) >> 32); }

   private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnv1a64Prime = 0x100000001b3ull;

constexpr uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv1a64Offset) {
    for (char c : s) {
        h ^= static_cast<unsigned char>(c);
        h *= kFnv1a64Prime;
    }
    return h;
}

}  // namespace tracelm
