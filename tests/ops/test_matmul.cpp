// The matmul family (matmul and the fused matmuls and glu_matmul): every backend against the CPU backend
// (support/op_conformance.h) on every float weight type, and the CPU backend against the references of
// src/ops/matmul (the quantized weights against exact math in tests/backends/test_quant.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ops/matmul/matmul.h"
#include "support/op_conformance.h"
#include "support/reference_check.h"

namespace tracelm {
namespace {

using namespace conformance;

// Calls f(weight type, T, K) for the shapes matmul-like ops are checked at. T: decode batch buckets and the
// largest matrix-vector batch, then prefill sizes. K = 67 is not a multiple of 8 (the unvectorised path).
template <typename F>
void for_matmul_shapes(F&& f) {
    for (DType w : kWeightTypes)
        for (int64_t T : {1, 3, 8, 32, 33, 100})
            for (int64_t K : {256, 67}) f(w, T, K);
}

std::vector<OpCase> matmul_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for_matmul_shapes([&](DType w, int64_t T, int64_t K) {
        const int64_t N = 45;
        const bool bias = T % 2 == 1;
        out.push_back({"matmul " + dt(w) + " T=" + std::to_string(T) + " K=" + std::to_string(K) + (bias ? " bias" : ""),
                       {f32("x", T, K, randn(rng, static_cast<size_t>(T * K))),
                        weight("w", w, N, K, randn(rng, static_cast<size_t>(N * K))), f32("bias", 1, N, randn(rng, N)),
                        f32("y", T, N, std::vector<float>(T * N))},
                       {3},
                       kReduction,
                       [bias](Backend& be, const Bound& b) {
                           be.matmul(b.t[0], b.t[1], bias ? &b.t[2] : nullptr, b.t[3]);
                       }});
    });
    return out;
}

std::vector<OpCase> matmuls_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    const int64_t K = 256;
    for (DType w : kWeightTypes) {
        for (int64_t T : {1, 8, 33}) {
            for (const bool three : {true, false}) {
                // q/k/v-like: three matrices, biases on two of them; gate/up-like: two, no bias.
                const std::vector<int64_t> N = three ? std::vector<int64_t>{45, 20, 21} : std::vector<int64_t>{37, 37};
                std::vector<HostTensor> t{f32("x", T, K, randn(rng, static_cast<size_t>(T * K)))};
                for (size_t i = 0; i < N.size(); ++i) {
                    const std::string id = std::to_string(i);
                    t.push_back(weight("w" + id, w, N[i], K, randn(rng, static_cast<size_t>(N[i] * K))));
                    t.push_back(f32("bias" + id, 1, N[i], randn(rng, static_cast<size_t>(N[i]))));
                    t.push_back(f32("y" + id, T, N[i], std::vector<float>(static_cast<size_t>(T * N[i]))));
                }
                const size_t n = N.size();
                // Tensors of output i: w 1+3i, bias 2+3i, y 3+3i; the first output has no bias.
                const auto bias = [](const Bound& b, size_t i) { return i == 0 ? nullptr : &b.t[2 + 3 * i]; };
                std::vector<size_t> outputs;
                for (size_t i = 0; i < n; ++i) outputs.push_back(3 + 3 * i);
                out.push_back({"matmuls " + dt(w) + " T=" + std::to_string(T) + " outputs=" + std::to_string(n), t,
                               outputs, kReduction,
                               [n, bias](Backend& be, const Bound& b) {
                                   std::vector<MatmulOut> outs;
                                   for (size_t i = 0; i < n; ++i) outs.push_back({&b.t[1 + 3 * i], bias(b, i), b.t[3 + 3 * i]});
                                   be.matmuls(b.t[0], outs);
                               },
                               [n, bias](Backend& be, const Bound& b) {
                                   for (size_t i = 0; i < n; ++i) be.matmul(b.t[0], b.t[1 + 3 * i], bias(b, i), b.t[3 + 3 * i]);
                               }});
            }
        }
    }
    return out;
}

std::vector<OpCase> glu_matmul_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    int n = 0;
    for_matmul_shapes([&](DType w, int64_t T, int64_t K) {
        const int64_t N = 45;
        // Every activation in turn over the shapes.
        const Activation act = std::array{Activation::Silu, Activation::GeluTanh, Activation::GeluTanhF16}[n++ % 3];
        out.push_back({"glu_matmul " + std::string(activation_name(act)) + " " + dt(w) + " T=" + std::to_string(T) +
                           " K=" + std::to_string(K),
                       {f32("gate", T, K, randn(rng, static_cast<size_t>(T * K), 3.0f)),
                        f32("up", T, K, randn(rng, static_cast<size_t>(T * K))),
                        weight("w", w, N, K, randn(rng, static_cast<size_t>(N * K))),
                        f32("y", T, N, std::vector<float>(T * N))},
                       {3},
                       kReduction,
                       [act](Backend& be, const Bound& b) { be.glu_matmul(b.t[0], b.t[1], act, b.t[2], b.t[3]); },
                       [act](Backend& be, const Bound& b) {
                           be.glu(b.t[0], b.t[1], act, b.t[0]);
                           be.matmul(b.t[0], b.t[2], nullptr, b.t[3]);
                       }});
    });
    return out;
}

// GGML's block weights, on the backends that run them: the CPU backend computes what llama.cpp's does, in the float
// operations and order of backends/cpu/kernels/quant.h, which a device can follow exactly, so the bound is 0. That
// order depends on batch_rows for the K types (tiled from kGgmlTiledMinRows rows), so both orders are run, also on
// fewer rows than batch_rows (a chunk of a larger product), and through matmuls and glu_matmul.
std::vector<OpCase> quant_matmul_cases(std::mt19937& rng, const BackendCapabilities& caps) {
    std::vector<OpCase> out;
    const int64_t N = 45, K = 512;
    for (DType w : kBlockTypes) {
        if (!caps.has_weight_type(w)) continue;
        for (const auto& shape : {std::pair<int64_t, int64_t>{1, 1}, {3, 3}, {3, 8}, {33, 33}}) {
            const int64_t T = shape.first, rows = shape.second;
            const bool bias = T != 3;
            out.push_back({"matmul " + dt(w) + " T=" + std::to_string(T) + " batch_rows=" + std::to_string(rows) +
                               (bias ? " bias" : ""),
                           {f32("x", T, K, randn(rng, static_cast<size_t>(T * K))),
                            block_weight("w", w, N, K, randn(rng, static_cast<size_t>(N * K)), rng),
                            f32("bias", 1, N, randn(rng, N)), f32("y", T, N, std::vector<float>(T * N))},
                           {3},
                           0.0,
                           [bias, rows](Backend& be, const Bound& b) {
                               be.matmul(b.t[0], b.t[1], bias ? &b.t[2] : nullptr, b.t[3], rows);
                           }});
        }
        for (const int64_t T : {2, 9}) {
            out.push_back({"matmuls " + dt(w) + " T=" + std::to_string(T),
                           {f32("x", T, K, randn(rng, static_cast<size_t>(T * K))),
                            block_weight("w0", w, N, K, randn(rng, static_cast<size_t>(N * K)), rng),
                            block_weight("w1", w, 20, K, randn(rng, static_cast<size_t>(20 * K)), rng),
                            f32("bias", 1, 20, randn(rng, 20)), f32("y0", T, N, std::vector<float>(T * N)),
                            f32("y1", T, 20, std::vector<float>(T * 20))},
                           {4, 5},
                           0.0,
                           [T](Backend& be, const Bound& b) {
                               const std::vector<MatmulOut> outs = {{&b.t[1], nullptr, b.t[4]}, {&b.t[2], &b.t[3], b.t[5]}};
                               be.matmuls(b.t[0], outs, T);
                           }});
            out.push_back({"glu_matmul " + dt(w) + " T=" + std::to_string(T),
                           {f32("gate", T, K, randn(rng, static_cast<size_t>(T * K), 3.0f)),
                            f32("up", T, K, randn(rng, static_cast<size_t>(T * K))),
                            block_weight("w", w, N, K, randn(rng, static_cast<size_t>(N * K)), rng),
                            f32("y", T, N, std::vector<float>(T * N))},
                           {3},
                           0.0,
                           [T](Backend& be, const Bound& b) { be.glu_matmul(b.t[0], b.t[1], Activation::Silu, b.t[2], b.t[3], T); }});
        }
    }
    return out;
}

TEST_P(OpConformance, MatmulMatchesTheCpuReference) { check(matmul_cases(rng_)); }
TEST_P(OpConformance, QuantizedMatmulMatchesTheCpuReferenceBitForBit) {
    const std::vector<OpCase> cases = quant_matmul_cases(rng_, be_->capabilities());
    if (cases.empty()) GTEST_SKIP() << GetParam() << " runs no GGML block weights";
    check(cases);
}
TEST_P(OpConformance, MatmulsEqualOneMatmulPerOutput) { check(matmuls_cases(rng_)); }
TEST_P(OpConformance, GluMatmulEqualsGluThenMatmul) { check(glu_matmul_cases(rng_)); }


// ---- the CPU backend against the references of src/ops/matmul ----

using MatmulReference = testing::OpReferenceTest;

// Decode and prefill row counts, K a multiple of the vector width and not, with and without a bias.
TEST_F(MatmulReference, MatmulMatchesExactMathOnFloatWeights) {
    const int64_t N = 45;
    for (const DType dt : {DType::F32, DType::BF16})
        for (const int64_t T : {1, 5, 40})
            for (const int64_t K : {256, 67}) {
                const bool with_bias = T != 5;
                SCOPED_TRACE(std::string(dtype_name(dt)) + " T=" + std::to_string(T) + " K=" + std::to_string(K));
                const auto x = randn(T * K), w = randn(N * K), bias = randn(N);
                const Tensor wt = dt == DType::F32 ? f32("w", N, K, w) : make("w", dt, N, K, to_bf16(w));
                const Tensor bt = f32("bias", 1, N, bias), out = f32("out", T, N, std::vector<float>(T * N));
                be.matmul(f32("x", T, K, x), wt, with_bias ? &bt : nullptr, out);
                const std::vector<float> got = get<float>(out);
                const std::span<const float> b = with_bias ? std::span<const float>(bias) : std::span<const float>();
                if (dt == DType::F32) {
                    expect_close(got, reference::matmul(x, w, K, b), 1e-5, "matmul");
                } else {
                    // bf16 weights: kernels with AVX512_BF16 round x to bf16 too (kernels_avx512.cpp), the others
                    // do not; either way the result is exact math over the values they multiply.
                    const std::vector<float> wv = bf16_values(w);
                    EXPECT_LE(std::min(scaled_error(got, reference::matmul(x, wv, K, b)),
                                       scaled_error(got, reference::matmul(bf16_values(x), wv, K, b))),
                              1e-5);
                }
            }
}

TEST_F(MatmulReference, MatmulsAndGluMatmulMatchExactMath) {
    const int64_t T = 9, K = 96, N = 40;
    const auto x = randn(T * K), w0 = randn(N * K), w1 = randn(N * K), w2 = randn(N * K), bias = randn(N);
    const Tensor xt = f32("x", T, K, x), t0 = f32("w0", N, K, w0), t1 = f32("w1", N, K, w1), t2 = f32("w2", N, K, w2);
    const Tensor b1 = f32("b1", 1, N, bias);
    const std::vector<MatmulOut> outs = {{&t0, nullptr, f32("o0", T, N, std::vector<float>(T * N))},
                                         {&t1, &b1, f32("o1", T, N, std::vector<float>(T * N))},
                                         {&t2, nullptr, f32("o2", T, N, std::vector<float>(T * N))}};
    be.matmuls(xt, outs);
    expect_close(get<float>(outs[0].out), reference::matmul(x, w0, K, {}), 1e-5, "matmuls[0]");
    expect_close(get<float>(outs[1].out), reference::matmul(x, w1, K, bias), 1e-5, "matmuls[1]");
    expect_close(get<float>(outs[2].out), reference::matmul(x, w2, K, {}), 1e-5, "matmuls[2]");

    std::vector<float> gate = randn(T * K);
    for (float& g : gate) g *= 4.0f;
    for (const Activation act : {Activation::Silu, Activation::GeluTanh}) {
        const Tensor out = f32("down", T, N, std::vector<float>(T * N));
        be.glu_matmul(f32("gate", T, K, gate), f32("up", T, K, x), act, t0, out);
        expect_close(get<float>(out), reference::glu_matmul(gate, x, act, w0, K), 1e-5, activation_name(act));
    }
}

}  // namespace
}  // namespace tracelm
