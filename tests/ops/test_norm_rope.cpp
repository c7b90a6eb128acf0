// The norm_rope family (rms_norm, layer_norm, rope_neox and the fused add_rms_norm and qk_norm_rope_kv_write): every
// backend against the CPU backend (support/op_conformance.h), and the CPU backend against the references of
// src/ops/norm_rope.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include "ops/attention/attention.h"
#include "ops/norm_rope/norm_rope.h"
#include "support/op_conformance.h"
#include "support/reference_check.h"

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

std::vector<OpCase> layer_norm_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for (DType w : kWeightTypes) {
        // Rows off zero mean, as the indexer's keys are: the mean must come out before the variance.
        std::vector<float> x = randn(rng, 5 * 128, 2.0f);
        for (size_t i = 0; i < x.size(); ++i) x[i] += static_cast<float>(i / 128) * 3.0f - 4.0f;
        out.push_back({"layer_norm " + dt(w),
                       {f32("x", 5, 128, x), weight("w", w, 1, 128, randn(rng, 128)),
                        weight("b", w, 1, 128, randn(rng, 128)), f32("out", 5, 128, std::vector<float>(5 * 128))},
                       {3},
                       kReduction,
                       [](Backend& be, const Bound& b) { be.layer_norm(b.t[0], b.t[1], b.t[2], 1e-6f, b.t[3]); }});
        out.push_back({"layer_norm in place " + dt(w),
                       {f32("x", 5, 128, x), weight("w", w, 1, 128, randn(rng, 128)),
                        weight("b", w, 1, 128, randn(rng, 128))},
                       {0},
                       kReduction,
                       [](Backend& be, const Bound& b) { be.layer_norm(b.t[0], b.t[1], b.t[2], 1e-6f, b.t[0]); }});
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
TEST_P(OpConformance, LayerNormMatchesTheCpuReference) { check(layer_norm_cases(rng_)); }
TEST_P(OpConformance, RopeNeoxMatchesTheCpuReference) { check(rope_cases(rng_)); }
TEST_P(OpConformance, AddRmsNormEqualsAddThenRmsNorm) { check(add_rms_norm_cases(rng_)); }
TEST_P(OpConformance, QkNormRopeKvWriteEqualsItsUnfusedOps) { check(qk_norm_rope_kv_write_cases(rng_)); }


// ---- the CPU backend against the references of src/ops/norm_rope ----

using NormRopeReference = testing::OpReferenceTest;

TEST_F(NormRopeReference, RmsNormAndAddRmsNormMatchExactMath) {
    const auto x = randn(7 * 1000), delta = randn(7 * 1000), w = randn(1000);
    for (const DType dt : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(dtype_name(dt));
        const Tensor wt = dt == DType::F32 ? f32("w", 1, 1000, w) : make("w", dt, 1, 1000, to_bf16(w));
        const std::vector<float> wv = dt == DType::F32 ? w : bf16_values(w);
        const Tensor out = f32("out", 7, 1000, std::vector<float>(7000));
        be.rms_norm(f32("x", 7, 1000, x), wt, 1e-6f, out);
        expect_close(get<float>(out), reference::rms_norm(x, 1000, wv, 1e-6), 1e-5, "rms_norm");

        const Tensor xt = f32("x", 7, 1000, x);
        be.add_rms_norm(xt, f32("delta", 7, 1000, delta), wt, 1e-6f, out);
        const reference::AddRmsNorm want = reference::add_rms_norm(x, delta, 1000, wv, 1e-6);
        expect_close(get<float>(xt), want.sum, 1e-7, "add_rms_norm's sum");
        expect_close(get<float>(out), want.out, 1e-5, "add_rms_norm");
    }
}

TEST_F(NormRopeReference, LayerNormMatchesExactMathInPlaceToo) {
    std::vector<float> x = randn(6 * 96);
    for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] * 0.5f + 10.0f;  // a large mean, a small spread
    const auto w = randn(96), b = randn(96);
    for (const DType dt : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(dtype_name(dt));
        const Tensor wt = dt == DType::F32 ? f32("w", 1, 96, w) : make("w", dt, 1, 96, to_bf16(w));
        const Tensor bt = dt == DType::F32 ? f32("b", 1, 96, b) : make("b", dt, 1, 96, to_bf16(b));
        const std::vector<double> want = reference::layer_norm(x, 96, dt == DType::F32 ? w : bf16_values(w),
                                                               dt == DType::F32 ? b : bf16_values(b), 1e-6);
        const Tensor out = f32("out", 6, 96, std::vector<float>(6 * 96));
        be.layer_norm(f32("x", 6, 96, x), wt, bt, 1e-6f, out);
        expect_close(get<float>(out), want, 1e-6, "layer_norm");
        const Tensor xt = f32("x", 6, 96, x);
        be.layer_norm(xt, wt, bt, 1e-6f, xt);
        EXPECT_EQ(get<float>(xt), get<float>(out)) << "in place";
    }
    // The reference itself on a row worked by hand: (1, 2, 3, 6) has mean 3 and variance 3.5.
    const std::vector<float> row = {1, 2, 3, 6}, ones(4, 1.0f), zeros(4, 0.0f);
    const std::vector<double> r = reference::layer_norm(row, 4, ones, zeros, 0.0);
    EXPECT_NEAR(r[0], -2.0 / std::sqrt(3.5), 1e-15);
    EXPECT_NEAR(r[3], 3.0 / std::sqrt(3.5), 1e-15);
    const Tensor x2 = f32("x", 2, 4, std::vector<float>(8));
    EXPECT_THROW(be.layer_norm(x2, f32("w", 1, 4, ones), make("b", DType::BF16, 1, 4, to_bf16(zeros)), 1e-6f, x2),
                 std::invalid_argument);  // weight and bias of different types
}

TEST_F(NormRopeReference, RopeNeoxRotatesHalvesByExactAngles) {
    const int heads = 2, hd = 8, T = 3;
    const std::vector<int32_t> pos = {0, 5, 1000};
    // Without scaling, then with factors dividing each pair's frequency (as Llama 3.1's rope_freqs do).
    const std::vector<float> factors = {1.0f, 2.5f, 8.0f, 0.5f};
    for (const bool scaled : {false, true}) {
        SCOPED_TRACE(scaled ? "scaled" : "plain");
        const auto x = randn(T * heads * hd);
        const Tensor xt = f32("x", T, heads * hd, x);
        const std::span<const float> f = scaled ? std::span<const float>(factors) : std::span<const float>();
        be.rope_neox(xt, i32("pos", T, 1, pos), heads, hd, RopeSpec{10000.0f, f});
        // Angles up to 1000 rad rounded as llama.cpp does (runtime/rope.h): a few f32 ulps of the angle.
        expect_close(get<float>(xt), reference::rope_neox(x, pos, heads, hd, 10000.0, f), 2e-4, "rope_neox");
    }
}

TEST_F(NormRopeReference, QkNormRopeKvWriteNormsRotatesAndWritesTheCache) {
    const int T = 4, H = 4, KV = 2, hd = 16, slots = 8;
    const int64_t kv_dim = KV * hd;
    const auto q = randn(T * H * hd), k = randn(T * kv_dim), v = randn(T * kv_dim), qn = randn(hd), kn = randn(hd);
    const std::vector<int32_t> pos = {0, 3, 17, 300}, slot_mapping = {5, -1, 0, 7};
    const Tensor qt = f32("q", T, H * hd, q), kt = f32("k", T, kv_dim, k);
    const Tensor kc = f32("kc", slots, kv_dim, std::vector<float>(slots * kv_dim, 9.0f));
    const Tensor vc = f32("vc", slots, kv_dim, std::vector<float>(slots * kv_dim, 9.0f));
    const Tensor qnt = f32("q_norm", 1, hd, qn), knt = f32("k_norm", 1, hd, kn);
    const float q_scale = 0.2f;  // Gemma's query scaling (1 / sqrt(query_pre_attn_scalar))
    be.qk_norm_rope_kv_write(QkvPrologue{qt, kt, f32("v", T, kv_dim, v), &qnt, &knt, 1e-6f, i32("pos", 1, T, pos),
                                         RopeSpec{1e4f, {}}, i32("slots", 1, T, slot_mapping), kc, vc, H, KV, hd,
                                         q_scale});
    const reference::QkPrologue want = reference::qk_norm_rope(q, k, pos, H, KV, hd, qn, kn, 1e-6, 1e4, {}, q_scale);
    expect_close(get<float>(qt), want.q, 1e-5, "q");
    expect_close(get<float>(kt), want.k, 1e-5, "k");
    // The cache holds the normed, rotated k (as the op left it in kt) and v, at the mapped slots only.
    std::vector<float> kc_want(slots * kv_dim, 9.0f), vc_want(slots * kv_dim, 9.0f);
    reference::kv_write(get<float>(kt), v, slot_mapping, kv_dim, kc_want, vc_want);
    EXPECT_EQ(get<float>(kc), kc_want);
    EXPECT_EQ(get<float>(vc), vc_want);
}

}  // namespace
}  // namespace tracelm
