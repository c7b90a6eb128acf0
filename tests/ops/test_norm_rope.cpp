// Op conformance (support/op_conformance.h) of the norm_rope family: rms_norm, rope_neox and the fused
// add_rms_norm and qk_norm_rope_kv_write.
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/op_conformance.h"

namespace tracelm {
namespace {

using namespace conformance;

std::vector<OpCase> rms_norm_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for (DType w : kWeightTypes) {
        out.push_back({"rms_norm " + dt(w),
                       {f32("x", 7, 1000, randn(rng, 7000, 3.0f)), weight("w", w, 1, 1000, randn(rng, 1000)),
                        f32("out", 7, 1000, std::vector<float>(7000))},
                       {2},
                       kReduction,
                       [](Backend& be, const Bound& b) { be.rms_norm(b.t[0], b.t[1], 1e-6f, b.t[2]); }});
        // In place over per-head rows, as the decoder's q/k norm runs it.
        out.push_back({"rms_norm in place " + dt(w),
                       {f32("x", 6, 128, randn(rng, 6 * 128)), weight("w", w, 1, 64, randn(rng, 64))},
                       {0},
                       kReduction,
                       [](Backend& be, const Bound& b) {
                           const Tensor heads = b.t[0].view(12, 64);
                           be.rms_norm(heads, b.t[1], 1e-6f, heads);
                       }});
    }
    return out;
}

// RoPE frequency factors of a head of 64 (Llama 3.1 style: 1 for the fast pairs, 8 for the slow ones, a smooth
// band between), for the scaled cases.
std::vector<float> rope_test_factors() {
    std::vector<float> f(32);
    for (size_t i = 0; i < f.size(); ++i) f[i] = i < 10 ? 1.0f : i < 20 ? 1.0f + 0.7f * static_cast<float>(i - 10) : 8.0f;
    return f;
}

std::vector<OpCase> rope_cases(std::mt19937& rng) {
    const int heads = 3, hd = 64;
    std::vector<OpCase> out;
    for (const bool scaled : {false, true}) {
        out.push_back({scaled ? "rope_neox scaled" : "rope_neox",
                       {f32("x", 5, heads * hd, randn(rng, 5 * heads * hd)), i32("pos", 1, 5, {0, 1, 17, 1000, 4095})},
                       {0},
                       // Angles up to 4095 rad: a 1-ulp difference in the angle moves sin/cos by ~2e-7 absolute.
                       1e-5,
                       [scaled, factors = rope_test_factors()](Backend& be, const Bound& b) {
                           be.rope_neox(b.t[0], b.t[1], heads, hd, RopeSpec{1e6f, scaled ? factors : std::span<const float>()});
                       }});
    }
    return out;
}

std::vector<OpCase> add_rms_norm_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for (DType w : kWeightTypes) {
        out.push_back({"add_rms_norm " + dt(w),
                       {f32("x", 7, 1000, randn(rng, 7000, 3.0f)), f32("delta", 7, 1000, randn(rng, 7000)),
                        weight("w", w, 1, 1000, randn(rng, 1000)), f32("out", 7, 1000, std::vector<float>(7000))},
                       {0, 3},
                       kReduction,
                       [](Backend& be, const Bound& b) { be.add_rms_norm(b.t[0], b.t[1], b.t[2], 1e-6f, b.t[3]); },
                       [](Backend& be, const Bound& b) {
                           be.add(b.t[0], b.t[1], b.t[0]);
                           be.rms_norm(b.t[0], b.t[2], 1e-6f, b.t[3]);
                       }});
    }
    return out;
}

std::vector<OpCase> qk_norm_rope_kv_write_cases(std::mt19937& rng) {
    const int T = 5, H = 4, KV = 2, hd = 64;
    const int64_t q_dim = H * hd, kv_dim = KV * hd, slots = 16;
    static const std::vector<float> factors = rope_test_factors();
    std::vector<OpCase> out;
    for (const bool norm : {true, false}) {
        for (DType w : {DType::F32, DType::BF16}) {
            if (!norm && w != DType::F32) continue;
            for (const bool scaled : {false, true}) {
                const RopeSpec rope{1e6f, scaled ? std::span<const float>(factors) : std::span<const float>()};
                const auto tensors = [norm, rope](const Bound& b) {
                    return QkvPrologue{b.t[0], b.t[1], b.t[2], norm ? &b.t[3] : nullptr, norm ? &b.t[4] : nullptr,
                                       1e-6f, b.t[5], rope, b.t[6], b.t[7], b.t[8], H, KV, hd};
                };
                out.push_back(
                    {std::string("qk_norm_rope_kv_write ") + (norm ? "normed " + dt(w) : "without norm") +
                         (scaled ? " scaled" : ""),
                     {f32("q", T, q_dim, randn(rng, T * q_dim, 2.0f)), f32("k", T, kv_dim, randn(rng, T * kv_dim, 2.0f)),
                      f32("v", T, kv_dim, randn(rng, T * kv_dim)), weight("q_norm", w, 1, hd, randn(rng, hd)),
                      weight("k_norm", w, 1, hd, randn(rng, hd)), i32("pos", 1, T, {0, 1, 17, 1000, 4095}),
                      i32("slots", 1, T, {3, -1, 10, 15, 16}), f32("kc", slots, kv_dim, randn(rng, slots * kv_dim)),
                      f32("vc", slots, kv_dim, randn(rng, slots * kv_dim))},
                     {0, 1, 7, 8},
                     1e-5,  // as rope_neox: angles up to 4095 rad
                     [tensors](Backend& be, const Bound& b) { be.qk_norm_rope_kv_write(tensors(b)); },
                     [norm, rope](Backend& be, const Bound& b) {
                         if (norm) {
                             const Tensor qh = b.t[0].view(T * H, hd), kh = b.t[1].view(T * KV, hd);
                             be.rms_norm(qh, b.t[3], 1e-6f, qh);
                             be.rms_norm(kh, b.t[4], 1e-6f, kh);
                         }
                         be.rope_neox(b.t[0], b.t[5], H, hd, rope);
                         be.rope_neox(b.t[1], b.t[5], KV, hd, rope);
                         be.kv_write(b.t[1], b.t[2], b.t[6], b.t[7], b.t[8]);
                     }});
            }
        }
    }
    return out;
}

TEST_P(OpConformance, RmsNormMatchesTheCpuReference) { check(rms_norm_cases(rng_)); }
TEST_P(OpConformance, RopeNeoxMatchesTheCpuReference) { check(rope_cases(rng_)); }
TEST_P(OpConformance, AddRmsNormEqualsAddThenRmsNorm) { check(add_rms_norm_cases(rng_)); }
TEST_P(OpConformance, QkNormRopeKvWriteEqualsItsUnfusedOps) { check(qk_norm_rope_kv_write_cases(rng_)); }

}  // namespace
}  // namespace tracelm
