// The sampling op (ops/sampling/sampling.h) on the CPU backend: Philox against its published answers, empirical
// distributions against an independent double-precision model of the filtered distribution, penalties and logprobs
// against their definitions, the fast CPU op against the plain reference, and replays that draw what eager calls
// draw without allocating. The CUDA op is in test_sampling_cuda.cpp, the engine's sampling in
// tests/engine/test_engine_sampling.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "ops/sampling/sampling.h"
#include "support/op_conformance.h"
#include "support/sampling_support.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using sampling::RowParams;
using testing::params;
using testing::SampleOp;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Philox, MatchesRandom123sKnownAnswers) {
    // Random123's kat_vectors for philox4x32 with 10 rounds: counter, key -> output.
    struct Kat {
        uint32_t ctr[4], key[2], out[4];
    };
    const Kat kats[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (const Kat& k : kats) {
        const sampling::Philox4 r = sampling::philox4x32_10({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
        for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out[i]) << i;
    }
}

// Every backend against the CPU backend (support/op_conformance.h): eight rows of 3001 logits (ties, a NaN, a row
// with +inf twice) under greedy, temperature, top_k, top_p (widened past its first selection), min_p, penalties, a forced token
// and draw bases, with logprobs (padded with -inf past the valid tokens) or none.
std::vector<conformance::OpCase> sample_cases(std::mt19937& rng) {
    using namespace conformance;
    const int64_t R = 8, V = 3001;
    std::vector<float> l = randn(rng, static_cast<size_t>(R * V), 2.0f);
    for (size_t i = 0; i < l.size(); i += 2) l[i] = std::round(l[i] * 2) / 2;  // ties
    l[17] = kNan;
    l[7 * V + 99] = l[7 * V + 2000] = kInf;
    std::vector<RowParams> ps = {params(0.0f),
                                 params(1.0f, 0, 1.0f, 0.0f, 11),
                                 params(0.7f, 40, 0.95f, 0.0f, 12),
                                 params(1.2f, 0, 0.97f, 0.05f, 13),
                                 params(0.9f, 0, 1.0f, 0.2f, 14),
                                 params(1.0f, 2999, 0.5f, 0.0f, 15),
                                 params(0.8f, 7, 1.0f, 0.0f, 16),
                                 params(1.0f, 0, 1.0f, 0.0f, 17)};
    ps[1].logprobs = ps[2].logprobs = 20;
    ps[6].logprobs = ps[7].logprobs = 3;
    ps[2].repetition_penalty = 1.3f;
    ps[2].frequency_penalty = 0.2f;
    ps[3].presence_penalty = 0.5f;
    ps[4].repetition_penalty = 0.8f;
    ps[6].forced = 1 + 1234;
    for (size_t r = 0; r < ps.size(); ++r) ps[r].draw_base = static_cast<int32_t>(r * 3) - 4;
    std::vector<int32_t> counts(static_cast<size_t>(R * V), 0);
    for (int i = 0; i < 3000; ++i) counts[rng() % counts.size()] = (rng() % 2 ? sampling::kPromptBit : 0) | (rng() % 4);
    std::vector<int32_t> words(static_cast<size_t>(R * sampling::kParamWords));
    std::memcpy(words.data(), ps.data(), words.size() * 4);
    return {{"sample",
             {f32("logits", R, V, l), i32("params", R, sampling::kParamWords, words), i32("counts", R, V, counts),
              i32("step", 1, 1, {5}), i32("ids", 1, R, std::vector<int32_t>(R, -1)),
              f32("logprobs", R, 1 + sampling::kMaxLogprobs, std::vector<float>(R * (1 + sampling::kMaxLogprobs))),
              i32("top_ids", R, sampling::kMaxLogprobs, std::vector<int32_t>(R * sampling::kMaxLogprobs))},
             {0, 2, 4, 5, 6},
             kElementwise,
             [](Backend& be, const Bound& b) {
                 be.sample(b.t[0], SamplingIo{b.t[1], b.t[2], b.t[3], 2, b.t[5], b.t[6], b.sample_ws}, b.t[4]);
             }}};
}

using conformance::OpConformance;
TEST_P(OpConformance, SampleMatchesTheCpuReference) { check(sample_cases(rng_)); }

// The filtered, renormalised distribution, written from the definitions in double precision.
std::vector<double> expected(const std::vector<float>& logits, const RowParams& p) {
    const size_t V = logits.size();
    std::vector<size_t> order;
    for (size_t v = 0; v < V; ++v)
        if (!std::isnan(logits[v])) order.push_back(v);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
    const double m = logits[order[0]];
    auto w = [&](size_t v, double t) {
        if (std::isinf(m) && m > 0) return logits[v] == m ? 1.0 : 0.0;
        return std::exp((logits[v] - m) / t);
    };
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < order.size()) order.resize(static_cast<size_t>(p.top_k));
    double z = 0;
    for (size_t v : order) z += w(v, 1.0);
    double cum = 0;
    for (size_t i = 0; i < order.size(); ++i) {
        cum += w(order[i], 1.0) / z;
        if (cum >= p.top_p) {
            order.resize(i + 1);
            break;
        }
    }
    if (p.min_p > 0) std::erase_if(order, [&](size_t v) { return logits[v] < m + std::log(double(p.min_p)); });
    std::vector<double> prob(V, 0.0);
    double zt = 0;
    for (size_t v : order) zt += w(v, p.temperature);
    for (size_t v : order) prob[v] = w(v, p.temperature) / zt;
    return prob;
}

// Chi-square critical values at significance 0.001 for 1..12 degrees of freedom.
constexpr double kChi2[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458,
                            24.322, 26.124, 27.877, 29.588, 31.264, 32.909};

// Draws `rows` x `steps` samples of one logit row (rows differ by seed, steps by draw number) and checks them
// against expected(): no draw outside its support, and a chi-square test at significance 0.001.
void check_distribution(const std::vector<float>& logits, RowParams p, int rows = 64, int steps = 200) {
    const int64_t V = static_cast<int64_t>(logits.size());
    cpu::CpuBackend be(2);
    SampleOp op(be, rows, V);
    std::vector<RowParams> ps(static_cast<size_t>(rows), p);
    for (int r = 0; r < rows; ++r) ps[static_cast<size_t>(r)].seed_lo = static_cast<uint32_t>(1000 + r);
    std::vector<float> all;
    for (int r = 0; r < rows; ++r) all.insert(all.end(), logits.begin(), logits.end());
    op.set(all, ps, std::vector<int32_t>(static_cast<size_t>(rows * V), 0), 0);
    std::vector<int64_t> hist(static_cast<size_t>(V), 0);
    for (int s = 0; s < steps; ++s) {
        op.set_logits(all, s);
        for (int32_t id : op.run()) ++hist[static_cast<size_t>(id)];
    }
    const std::vector<double> prob = expected(logits, p);
    const double n = static_cast<double>(rows) * steps;
    double chi2 = 0;
    int cells = 0;
    for (int64_t v = 0; v < V; ++v) {
        const double e = prob[static_cast<size_t>(v)] * n;
        if (prob[static_cast<size_t>(v)] == 0.0) {
            EXPECT_EQ(hist[static_cast<size_t>(v)], 0) << "token " << v << " is outside the allowed set";
            continue;
        }
        chi2 += (hist[static_cast<size_t>(v)] - e) * (hist[static_cast<size_t>(v)] - e) / e;
        ++cells;
    }
    if (cells > 1) {
        ASSERT_LE(cells - 1, 12);
        EXPECT_LT(chi2, kChi2[cells - 2]) << "chi-square over " << cells << " tokens";
    }
}

const std::vector<float> kLogits = {2.0f, 1.5f, 1.1f, 0.7f, 0.2f, -0.4f, -1.0f, -3.0f};

TEST(SamplingDistribution, TemperatureAloneFollowsTheExactDistribution) {
    check_distribution(kLogits, params(1.0f));
    check_distribution(kLogits, params(0.6f));
    check_distribution(kLogits, params(2.5f));
}
TEST(SamplingDistribution, TopKAloneFollowsTheExactDistribution) { check_distribution(kLogits, params(1.0f, 3)); }
TEST(SamplingDistribution, TopPAloneFollowsTheExactDistribution) { check_distribution(kLogits, params(1.0f, 0, 0.8f)); }
TEST(SamplingDistribution, MinPAloneFollowsTheExactDistribution) {
    check_distribution(kLogits, params(1.0f, 0, 1.0f, 0.2f));
}
TEST(SamplingDistribution, CombinedFiltersFollowTheExactDistribution) {
    check_distribution(kLogits, params(1.3f, 6, 0.9f, 0.1f));
    check_distribution(kLogits, params(0.8f, 5, 0.95f));
}
TEST(SamplingDistribution, TiesInfinitiesNansAndExtremeSettingsFollowTheExactDistribution) {
    SCOPED_TRACE("all logits equal");
    check_distribution(std::vector<float>(6, 0.5f), params(0.7f, 0, 0.9f));
    SCOPED_TRACE("NaN never drawn");
    check_distribution({1.0f, kNan, 0.5f, kNan, 0.0f}, params(1.0f));
    SCOPED_TRACE("one +inf");
    check_distribution({1.0f, kInf, 0.5f, 3.0f}, params(1.0f));
    SCOPED_TRACE("two +inf share the draws");
    check_distribution({kInf, 1.0f, kInf, 0.5f}, params(1.0f));
    SCOPED_TRACE("top_k above the vocabulary, top_p 1, min_p 0");
    check_distribution(kLogits, params(1.0f, 100, 1.0f, 0.0f));
    SCOPED_TRACE("tiny temperature: the maximum only");
    check_distribution(kLogits, params(1e-6f));
    SCOPED_TRACE("-inf never drawn");
    check_distribution({-kInf, 0.0f, -kInf, 1.0f}, params(1.0f));
}

// The fast op (radix selection, widening top_p) draws exactly what the plain reference draws.
TEST(SamplingOp, MatchesReferenceOnLargeRows) {
    const int64_t R = 6, V = 3000;
    cpu::CpuBackend be(2);
    SampleOp op(be, R, V);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (int trial = 0; trial < 8; ++trial) {
        std::vector<float> logits(static_cast<size_t>(R * V));
        for (float& x : logits) x = trial % 2 ? nd(rng) : std::round(nd(rng));  // rounding makes many ties
        logits[17] = kNan;
        logits[40] = -kInf;
        std::vector<RowParams> ps = {params(1.0f, 0, 0.9f, 0.0f, 11),   params(0.7f, 40, 0.95f, 0.0f, 12),
                                     params(1.2f, 0, 1.0f, 0.05f, 13),  params(0.0f, 5),
                                     params(1.0f, 2999, 0.5f, 0.0f, 14), params(0.9f, 0, 0.999f, 0.01f, 15)};
        ps[1].repetition_penalty = 1.3f;
        ps[1].frequency_penalty = 0.2f;
        ps[2].presence_penalty = 0.5f;
        ps[trial % 6].logprobs = 7;
        // A forced token (a scored prompt token) whatever the row's sampling; past the vocabulary it is not forced.
        const auto vocab = static_cast<int32_t>(V);
        ps[(trial + 3) % 6].forced = trial == 7 ? vocab + 1 : 1 + (trial * 397) % vocab;
        ps[(trial + 3) % 6].logprobs = 3;
        // Rows that joined at different steps draw from their own origin (some before step 0: unsigned wrap).
        for (int64_t r = 0; r < R; ++r) ps[static_cast<size_t>(r)].draw_base = static_cast<int32_t>(r * 7) - 3;
        std::vector<int32_t> counts(static_cast<size_t>(R * V), 0);
        for (int i = 0; i < 300; ++i) counts[rng() % counts.size()] = (rng() % 2 ? sampling::kPromptBit : 0) | (rng() % 4);
        op.set(logits, ps, counts, trial);
        const std::vector<int32_t> ids = op.run();
        const std::vector<float> lp = op.logprobs();
        const std::vector<int32_t> top = op.top_ids();
        const std::vector<float> out = op.logits();
        const std::vector<int32_t> cout = op.counts();
        for (int64_t r = 0; r < R; ++r) {
            SCOPED_TRACE(::testing::Message() << "trial " << trial << " row " << r);
            std::vector<int32_t> c(counts.begin() + r * V, counts.begin() + (r + 1) * V);
            const auto want = sampling::sample_row_reference(logits.data() + r * V, V, ps[static_cast<size_t>(r)],
                                                              c.data(), static_cast<uint32_t>(trial - ps[static_cast<size_t>(r)].draw_base));
            EXPECT_EQ(ids[static_cast<size_t>(r)], want.id);
            for (int64_t v = 0; v < V; ++v) {
                ASSERT_EQ(std::memcmp(&out[static_cast<size_t>(r * V + v)], &logits[static_cast<size_t>(r * V + v)], 4), 0);
                ASSERT_EQ(cout[static_cast<size_t>(r * V + v)], c[static_cast<size_t>(v)]);
            }
            if (ps[static_cast<size_t>(r)].logprobs >= 0) {
                EXPECT_EQ(lp[static_cast<size_t>(r * 21)], want.logprob);
                for (int i = 0; i < 20; ++i) {
                    EXPECT_EQ(top[static_cast<size_t>(r * 20 + i)], want.top_ids[i]);
                    EXPECT_EQ(lp[static_cast<size_t>(r * 21 + 1 + i)], want.top_logprobs[i]);
                }
            }
        }
    }
}

// Penalties on crafted histories against their definitions in double precision; the drawn token's count grows.
TEST(SamplingOp, PenaltiesFollowTheirDefinitions) {
    const int64_t V = 10;
    cpu::CpuBackend be(1);
    SampleOp op(be, 1, V);
    const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.5f, 0.0f, 1.25f, -0.75f, 4.0f, 0.1f};
    // Token 0: prompt only; 1: prompt and generated twice; 2: generated once; 3: generated 3 times; others unseen.
    std::vector<int32_t> counts(static_cast<size_t>(V), 0);
    counts[0] = sampling::kPromptBit;
    counts[1] = sampling::kPromptBit | 2;
    counts[2] = 1;
    counts[3] = 3;
    RowParams p = params(0.0f);
    p.repetition_penalty = 1.5f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.3f;
    op.set(logits, {p}, counts, 0);
    const int32_t id = op.run()[0];
    const std::vector<float> got = op.logits();
    std::vector<double> want(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) {
        double x = logits[static_cast<size_t>(v)];
        const int seen = counts[static_cast<size_t>(v)] != 0;
        const int gen = counts[static_cast<size_t>(v)] & sampling::kCountMask;
        if (seen) x = x > 0 ? x / 1.5 : x * 1.5;
        x -= gen * 0.3 + (gen > 0 ? 0.4 : 0.0);
        want[static_cast<size_t>(v)] = x;
        EXPECT_NEAR(got[static_cast<size_t>(v)], x, 1e-6) << v;
    }
    EXPECT_EQ(id, std::max_element(want.begin(), want.end()) - want.begin());
    std::vector<int32_t> after = counts;
    after[static_cast<size_t>(id)] += 1;
    EXPECT_EQ(op.counts(), after);
}

// Temperature 0 is Backend::argmax bit for bit, ties (lowest index) and NaN included.
TEST(SamplingOp, TemperatureZeroIsArgmax) {
    const int64_t R = 5, V = 1000;
    cpu::CpuBackend be(2);
    SampleOp op(be, R, V);
    std::mt19937 rng(9);
    std::vector<float> logits(static_cast<size_t>(R * V));
    for (float& x : logits) x = static_cast<float>(rng() % 50);  // many ties at the maximum
    logits[0] = kNan;
    for (int64_t v = 0; v < V; ++v) logits[static_cast<size_t>(4 * V + v)] = kNan;  // a row without a number
    std::vector<RowParams> ps(static_cast<size_t>(R), params(0.0f, 3, 0.5f, 0.2f, 77));
    op.set(logits, ps, std::vector<int32_t>(static_cast<size_t>(R * V), 0), 3);
    const std::vector<int32_t> ids = op.run();
    Buffer* lb = be.alloc(logits.size() * 4, "l");
    Buffer* ib = be.alloc(R * 4, "i");
    be.upload(whole(lb, DType::F32, R, V), logits.data());
    be.argmax(whole(lb, DType::F32, R, V), whole(ib, DType::I32, 1, R));
    std::vector<int32_t> want(static_cast<size_t>(R));
    be.download(whole(ib, DType::I32, 1, R), want.data());
    EXPECT_EQ(ids, want);
    be.free(lb);
    be.free(ib);
}

// Logprobs: the chosen token's and the n best, ranked, against a double-precision log-softmax.
TEST(SamplingOp, LogprobsMatchLogSoftmax) {
    const int64_t V = 500;
    cpu::CpuBackend be(1);
    SampleOp op(be, 1, V);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(V));
    for (float& x : logits) x = nd(rng);
    RowParams p = params(0.8f, 40, 0.95f, 0.0f, 5);
    p.logprobs = 20;
    op.set(logits, {p}, std::vector<int32_t>(static_cast<size_t>(V), 0), 0);
    const int32_t id = op.run()[0];
    double m = *std::max_element(logits.begin(), logits.end()), z = 0;
    for (float x : logits) z += std::exp(x - m);
    auto lsm = [&](int32_t v) { return logits[static_cast<size_t>(v)] - m - std::log(z); };
    const std::vector<float> lp = op.logprobs();
    const std::vector<int32_t> top = op.top_ids();
    EXPECT_NEAR(lp[0], lsm(id), 1e-4);
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(top[static_cast<size_t>(i)], order[static_cast<size_t>(i)]) << i;
        EXPECT_NEAR(lp[static_cast<size_t>(1 + i)], lsm(order[static_cast<size_t>(i)]), 1e-4) << i;
    }
    // A forced token is the row's token, with its own log-probability and the same best ones.
    p.forced = 1 + 123;
    op.set(logits, {p}, std::vector<int32_t>(static_cast<size_t>(V), 0), 0);
    EXPECT_EQ(op.run()[0], 123);
    EXPECT_NEAR(op.logprobs()[0], lsm(123), 1e-4);
    EXPECT_EQ(op.top_ids(), top);
}

// A graph replaying sample() draws what eager calls draw, step by step, and allocates nothing.
TEST(SamplingOp, ReplayEqualsEagerAndAllocatesNothing) {
    const int64_t R = 3, V = 2000;
    cpu::CpuBackend be(2);
    SampleOp eager(be, R, V), replay(be, R, V);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<RowParams> ps = {params(0.8f, 40, 0.95f, 0.0f, 1), params(1.0f, 0, 0.9f, 0.0f, 2),
                                 params(0.5f, 0, 1.0f, 0.1f, 3)};
    ps[0].logprobs = 3;
    std::vector<float> logits(static_cast<size_t>(R * V));
    for (float& x : logits) x = nd(rng);
    eager.set(logits, ps, std::vector<int32_t>(static_cast<size_t>(R * V), 0), 0);
    replay.set(logits, ps, std::vector<int32_t>(static_cast<size_t>(R * V), 0), 0);
    replay.capture();
    uint64_t allocations = 0;
    for (int32_t s = 0; s < 50; ++s) {
        eager.set_logits(logits, s);
        replay.set_logits(logits, s);
        const std::vector<int32_t> want = eager.run();
        const uint64_t before = testing::heap_allocations().load();
        replay.replay();
        allocations += testing::heap_allocations().load() - before;
        ASSERT_EQ(replay.ids(), want) << "step " << s;
        ASSERT_EQ(replay.logprobs(), eager.logprobs());
        ASSERT_EQ(replay.counts(), eager.counts());
    }
    EXPECT_EQ(allocations, 0u);
}

}  // namespace
}  // namespace tracelm
