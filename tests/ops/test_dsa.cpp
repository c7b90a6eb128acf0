// Op conformance (support/op_conformance.h) of the dsa family: sparse_attention, dsa_topk, dsa_indexer, and the
// paged step's dsa_indexer_paged and dsa_topk_causal.
#include <gtest/gtest.h>

#include <cmath>
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

// A paged step: two prefill chunks after earlier context (one with an unassigned block), a decode row and a padded
// row (8 rows, the harness's top-k workspace), over 4-token blocks scattered in the pool. Scores start at a sentinel, so positions the op leaves
// unspecified compare equal when it leaves them alone.
std::vector<OpCase> dsa_paged_cases(std::mt19937& rng) {
    const int S = 3, T = 8, H = 4, D = 16, bs = 4, max_blocks = 7, max_keys = 28, topk = 5, num_blocks = 24;
    const std::vector<int32_t> table = {17, 3, 9, -1, -1, -1, -1,  // 11 tokens
                                        20, -1, -1, -1, -1, -1, -1,  // 7 tokens, the second block unassigned
                                        0, 22, 5, 11, 14, 2, -1};   // 21 tokens
    const std::vector<HostTensor> meta = {i32("bt", S, max_blocks, table), i32("lens", 1, S, {11, 7, 21}),
                                          i32("qsl", 1, S + 1, {0, 3, 6, 7})};
    std::vector<float> scores = randn(rng, T * max_keys);
    for (float& x : scores) x = std::round(x * 2.0f);  // ties
    const auto with_meta = [&](std::vector<HostTensor> ts) {
        ts.insert(ts.end(), meta.begin(), meta.end());
        return ts;
    };
    const auto meta_of = [](const Bound& b, size_t at) {
        return AttentionMeta{b.t[at], b.t[at + 1], b.t[at + 2], S, bs};
    };
    return {{"dsa_indexer_paged",
             with_meta({f32("q", T, H * D, randn(rng, T * H * D)), f32("w", T, H, randn(rng, T * H)),
                        f32("cache", num_blocks * bs, D, randn(rng, num_blocks * bs * D)),
                        f32("scores", T, max_keys, std::vector<float>(T * max_keys, 12345.0f))}),
             {3},
             kReduction,
             [meta_of](Backend& be, const Bound& b) {
                 be.dsa_indexer_paged(b.t[0], b.t[1], b.t[2], meta_of(b, 4), H, b.t[3]);
             }},
            {"dsa_topk_causal",
             with_meta({f32("scores", T, max_keys, scores), i64("idx", T, topk, std::vector<int64_t>(T * topk, -7))}),
             {1},
             0.0,
             [meta_of](Backend& be, const Bound& b) { be.dsa_topk_causal(b.t[0], meta_of(b, 2), b.ws, b.t[1]); }}};
}

TEST_P(OpConformance, SparseAttentionMatchesTheCpuReference) { check(attention_cases(rng_, true)); }
// One op per test, so that a backend without one of them (NotImplemented skips the test) still checks the others.
TEST_P(OpConformance, DsaTopkMatchesTheCpuReference) { check({dsa_cases(rng_)[0]}); }
TEST_P(OpConformance, DsaIndexerMatchesTheCpuReference) { check({dsa_cases(rng_)[1]}); }
TEST_P(OpConformance, DsaPagedIndexerMatchesTheCpuReference) { check({dsa_paged_cases(rng_)[0]}); }
TEST_P(OpConformance, DsaCausalTopkMatchesTheCpuReference) { check({dsa_paged_cases(rng_)[1]}); }

}  // namespace
}  // namespace tracelm
