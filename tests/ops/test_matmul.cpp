// Op conformance (support/op_conformance.h) of the matmul family: matmul and the fused matmuls and
// silu_mul_matmul, on every float weight type.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "support/op_conformance.h"

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

std::vector<OpCase> silu_mul_matmul_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for_matmul_shapes([&](DType w, int64_t T, int64_t K) {
        const int64_t N = 45;
        out.push_back({"silu_mul_matmul " + dt(w) + " T=" + std::to_string(T) + " K=" + std::to_string(K),
                       {f32("gate", T, K, randn(rng, static_cast<size_t>(T * K), 3.0f)),
                        f32("up", T, K, randn(rng, static_cast<size_t>(T * K))),
                        weight("w", w, N, K, randn(rng, static_cast<size_t>(N * K))),
                        f32("y", T, N, std::vector<float>(T * N))},
                       {3},
                       kReduction,
                       [](Backend& be, const Bound& b) { be.silu_mul_matmul(b.t[0], b.t[1], b.t[2], b.t[3]); },
                       [](Backend& be, const Bound& b) {
                           be.silu_mul(b.t[0], b.t[1], b.t[0]);
                           be.matmul(b.t[0], b.t[2], nullptr, b.t[3]);
                       }});
    });
    return out;
}

TEST_P(OpConformance, MatmulMatchesTheCpuReference) { check(matmul_cases(rng_)); }
TEST_P(OpConformance, MatmulsEqualOneMatmulPerOutput) { check(matmuls_cases(rng_)); }
TEST_P(OpConformance, SiluMulMatmulEqualsSiluMulThenMatmul) { check(silu_mul_matmul_cases(rng_)); }

}  // namespace
}  // namespace tracelm
