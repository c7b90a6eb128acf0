// The CUDA sampling op (ops/sampling/sampling.h), where a device is present, against the plain reference. Without a
// usable device the test skips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backends/registry.h"
#include "ops/sampling/sampling.h"
#include "support/sampling_support.h"

namespace tracelm {
namespace {

using sampling::RowParams;
using testing::params;
using testing::SampleOp;

// The CUDA op (where a device is present) against the plain reference: ids of greedy and top_k rows exactly
// (their sums run in the same order), penalised logits and counts exactly, logprobs within 1e-5.
TEST(SamplingCuda, MatchesReference) {
    std::unique_ptr<Backend> be;
    for (const BackendInfo& b : backend_registry()) {
        if (b.name == "cuda" && b.unavailable().empty()) be = b.make({});
    }
    if (!be) GTEST_SKIP() << "no usable CUDA device";
    const int64_t R = 4, V = 151936;
    SampleOp op(*be, R, V);
    std::mt19937 rng(8);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(R * V));
    for (float& x : logits) x = std::round(nd(rng) * 4) / 4;
    std::vector<RowParams> ps = {params(0.8f, 40, 0.95f, 0.0f, 1), params(0.0f), params(1.0f, 1000, 0.5f, 0.01f, 3),
                                 params(0.7f, 7)};
    ps[0].logprobs = 20;
    ps[3].forced = 1 + 12345;  // a scored token
    ps[3].logprobs = 5;
    ps[1].repetition_penalty = 1.3f;
    ps[2].frequency_penalty = 0.4f;
    std::vector<int32_t> counts(static_cast<size_t>(R * V), 0);
    for (int i = 0; i < 2000; ++i) counts[rng() % counts.size()] = (rng() % 2 ? sampling::kPromptBit : 0) | (rng() % 3);
    for (int32_t step = 0; step < 4; ++step) {
        op.set(logits, ps, counts, step);
        const std::vector<int32_t> ids = op.run();
        const std::vector<float> out = op.logits(), lp = op.logprobs();
        const std::vector<int32_t> top = op.top_ids(), cnt = op.counts();
        std::vector<float> x = logits;
        std::vector<int32_t> c = counts;
        for (int64_t r = 0; r < R; ++r) {
            const auto want = sampling::sample_row_reference(x.data() + r * V, V, ps[static_cast<size_t>(r)],
                                                              c.data() + r * V, static_cast<uint32_t>(step));
            EXPECT_EQ(ids[static_cast<size_t>(r)], want.id) << r;
            if (ps[static_cast<size_t>(r)].logprobs >= 0) {
                EXPECT_NEAR(lp[static_cast<size_t>(r * 21)], want.logprob, 1e-5);
                for (int i = 0; i < 20; ++i) EXPECT_EQ(top[static_cast<size_t>(r * 20 + i)], want.top_ids[i]);
            }
        }
        EXPECT_EQ(std::memcmp(out.data(), x.data(), x.size() * 4), 0);
        EXPECT_EQ(cnt, c);
    }
}

// adjust_logits on CUDA against the plain reference, bit for bit: a bias only row, a mask only row, both, and none.
TEST(SamplingCuda, AdjustLogitsMatchesReference) {
    std::unique_ptr<Backend> be;
    for (const BackendInfo& b : backend_registry()) {
        if (b.name == "cuda" && b.unavailable().empty()) be = b.make({});
    }
    if (!be) GTEST_SKIP() << "no usable CUDA device";
    const int64_t R = 4, V = 151936, W = sampling::mask_words(V), B = sampling::kMaxLogitBias;
    SampleOp op(*be, R, V);
    std::mt19937 rng(12);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(R * V));
    for (float& x : logits) x = nd(rng);
    std::vector<uint32_t> masks(static_cast<size_t>(R * W));
    for (uint32_t& w : masks) w = rng() & rng();
    std::vector<int32_t> ids(static_cast<size_t>(R * B));
    std::vector<float> values(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = static_cast<int32_t>(rng() % V);
        values[i] = static_cast<float>(static_cast<int>(rng() % 201) - 100);
    }
    const std::vector<int32_t> flags = {0, static_cast<int32_t>(B), 1, 0, 1, 5, 0, 0};
    op.set(logits, std::vector<RowParams>(static_cast<size_t>(R)), std::vector<int32_t>(static_cast<size_t>(R * V)),
           0);
    op.set_adjust(flags, masks, ids, values);
    op.adjust();
    std::vector<float> want = logits;
    for (int64_t r = 0; r < R; ++r)
        sampling::adjust_row_reference(want.data() + r * V, V, flags[static_cast<size_t>(2 * r)] != 0,
                                       masks.data() + r * W, flags[static_cast<size_t>(2 * r + 1)],
                                       ids.data() + r * B, values.data() + r * B);
    EXPECT_EQ(std::memcmp(op.logits().data(), want.data(), want.size() * 4), 0);
}

}  // namespace
}  // namespace tracelm
