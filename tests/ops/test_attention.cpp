// Op conformance (support/op_conformance.h) of the attention family: kv_write and paged attention.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/op_conformance.h"

namespace tracelm {
namespace {

using namespace conformance;

std::vector<OpCase> kv_write_cases(std::mt19937& rng) {
    return {{"kv_write",
             {f32("k", 4, 24, randn(rng, 96)), f32("v", 4, 24, randn(rng, 96)), i32("slots", 1, 4, {3, -1, 10, 16}),
              f32("kc", 16, 24, randn(rng, 16 * 24)), f32("vc", 16, 24, randn(rng, 16 * 24))},
             {3, 4},
             0.0,
             [](Backend& be, const Bound& b) { be.kv_write(b.t[0], b.t[1], b.t[2], b.t[3], b.t[4]); }}};
}

TEST_P(OpConformance, KvWriteMatchesTheCpuReference) { check(kv_write_cases(rng_)); }
TEST_P(OpConformance, AttentionMatchesTheCpuReference) { check(attention_cases(rng_, false)); }

}  // namespace
}  // namespace tracelm
