// Op conformance (support/op_conformance.h) of the elementwise family: copy, embedding, add, silu_mul,
// gather_last.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "support/op_conformance.h"

namespace tracelm {
namespace {

using namespace conformance;

std::vector<OpCase> copy_cases(std::mt19937& rng) {
    return {{"copy", {f32("src", 5, 37, randn(rng, 5 * 37)), f32("dst", 5, 37, std::vector<float>(5 * 37))}, {1},
             0.0, [](Backend& be, const Bound& b) { be.copy(b.t[1], b.t[0]); }}};
}

std::vector<OpCase> embedding_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for (DType w : kWeightTypes) {
        // Ids outside [0, rows) give zero rows.
        out.push_back({"embedding " + dt(w),
                       {i32("ids", 1, 9, {3, 0, 49, -1, 50, 7, 7, 12, 1 << 30}),
                        weight("table", w, 50, 72, randn(rng, 50 * 72)), f32("out", 9, 72, std::vector<float>(9 * 72))},
                       {2},
                       0.0,
                       [](Backend& be, const Bound& b) { be.embedding(b.t[0], b.t[1], b.t[2]); }});
    }
    return out;
}

std::vector<OpCase> elementwise_cases(std::mt19937& rng) {
    const int64_t n = 3 * 1000;
    return {{"add",
             {f32("a", 3, 1000, randn(rng, n)), f32("b", 3, 1000, randn(rng, n)), f32("out", 3, 1000, std::vector<float>(n))},
             {2},
             0.0,
             [](Backend& be, const Bound& b) { be.add(b.t[0], b.t[1], b.t[2]); }},
            {"silu_mul",
             {f32("gate", 3, 1000, randn(rng, n, 4.0f)), f32("up", 3, 1000, randn(rng, n)),
              f32("out", 3, 1000, std::vector<float>(n))},
             {2},
             kElementwise,
             [](Backend& be, const Bound& b) { be.silu_mul(b.t[0], b.t[1], b.t[2]); }}};
}

std::vector<OpCase> gather_last_cases(std::mt19937& rng) {
    // Sequences of 0 (first: no last row), 3, 0 and 7 tokens.
    return {{"gather_last",
             {f32("x", 10, 33, randn(rng, 330)), i32("qsl", 1, 5, {0, 0, 3, 3, 10}),
              f32("out", 4, 33, std::vector<float>(132))},
             {2},
             0.0,
             [](Backend& be, const Bound& b) { be.gather_last(b.t[0], b.t[1], b.t[2]); }}};
}

TEST_P(OpConformance, CopyMatchesTheCpuReference) { check(copy_cases(rng_)); }
TEST_P(OpConformance, EmbeddingMatchesTheCpuReference) { check(embedding_cases(rng_)); }
TEST_P(OpConformance, AddAndSiluMulMatchTheCpuReference) { check(elementwise_cases(rng_)); }
TEST_P(OpConformance, GatherLastMatchesTheCpuReference) { check(gather_last_cases(rng_)); }

}  // namespace
}  // namespace tracelm
