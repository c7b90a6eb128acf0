// Op conformance (support/op_conformance.h) of the dsa family: sparse_attention, dsa_topk, dsa_indexer.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/op_conformance.h"

namespace tracelm {
namespace {

using namespace conformance;

std::vector<OpCase> dsa_cases(std::mt19937& rng) {
    const int64_t T = 4, nk = 700, topk = 16, H = 4, D = 16, keys = 50;
    std::vector<float> scores = randn(rng, T * nk);
    for (int64_t i = 0; i < nk; i += 3) scores[i] = 0.5f;  // ties in row 0
    return {{"dsa_topk",
             {f32("scores", T, nk, scores), i64("start", 1, T, {0, -5, 100, 650}), i64("end", 1, T, {700, 10, 400, 660}),
              i64("idx", T, topk, std::vector<int64_t>(T * topk, -7))},
             {3},
             0.0,
             [](Backend& be, const Bound& b) { be.dsa_topk(b.t[0], b.t[1], b.t[2], b.ws, b.t[3]); }},
            {"dsa_indexer",
             {f32("q", T, H * D, randn(rng, T * H * D)), f32("w", T, H, randn(rng, T * H)),
              f32("keys", keys, D, randn(rng, keys * D)), f32("scores", T, keys, std::vector<float>(T * keys))},
             {3},
             kReduction,
             [](Backend& be, const Bound& b) { be.dsa_indexer(b.t[0], b.t[1], b.t[2], H, b.t[3]); }}};
}

TEST_P(OpConformance, SparseAttentionMatchesTheCpuReference) { check(attention_cases(rng_, true)); }
TEST_P(OpConformance, DsaTopkAndIndexerMatchTheCpuReference) { check(dsa_cases(rng_)); }

}  // namespace
}  // namespace tracelm
