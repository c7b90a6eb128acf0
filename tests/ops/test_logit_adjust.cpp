// adjust_logits (ops/sampling/sampling.h): the CPU op against the plain reference, masked tokens never sampled under
// any sampler setting, logit_bias's -100 / +100, masks rewritten between replays of a captured adjust + sample equal
// to eager calls, and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "ops/sampling/sampling.h"
#include "support/op_conformance.h"
#include "support/sampling_support.h"

namespace tracelm {
namespace {

using sampling::RowParams;
using testing::params;
using testing::SampleOp;
using conformance::OpConformance;

std::vector<int32_t> no_counts(int64_t n) { return std::vector<int32_t>(static_cast<size_t>(n), 0); }

std::vector<float> random_logits(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = nd(rng);
    return x;
}

// Each row allows about a quarter of the tokens, at random.
std::vector<uint32_t> random_masks(int64_t R, int64_t W, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint32_t> m(static_cast<size_t>(R * W));
    for (uint32_t& w : m) w = rng() & rng();
    return m;
}

TEST(AdjustLogits, MatchesReference) {
    const int64_t R = 4, V = 1003;  // not a multiple of 32: the last word's high bits name no token
    const int64_t W = sampling::mask_words(V);
    cpu::CpuBackend be(2);
    SampleOp op(be, R, V);
    const std::vector<float> logits = random_logits(R * V, 7);
    std::vector<uint32_t> masks = random_masks(R, W, 8);
    std::vector<int32_t> bias_ids(static_cast<size_t>(R * sampling::kMaxLogitBias), 0);
    std::vector<float> bias_values(bias_ids.size(), 0.0f);
    std::mt19937 rng(9);
    for (size_t i = 0; i < bias_ids.size(); ++i) {
        // Ids repeat, and some are outside the vocabulary (skipped).
        bias_ids[i] = static_cast<int32_t>(rng() % (V + 20)) - 10;
        bias_values[i] = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 10.0f;
    }
    // Rows: untouched, mask only, bias only (every entry), both (a few entries).
    const std::vector<int32_t> flags = {0, 0, 1, 0, 0, sampling::kMaxLogitBias, 1, 7};
    op.set(logits, std::vector<RowParams>(R), no_counts(R * V), 0);
    op.set_adjust(flags, masks, bias_ids, bias_values);
    op.adjust();
    const std::vector<float> got = op.logits();
    for (int64_t r = 0; r < R; ++r) {
        std::vector<float> want(logits.begin() + r * V, logits.begin() + (r + 1) * V);
        sampling::adjust_row_reference(want.data(), V, flags[static_cast<size_t>(2 * r)] != 0, masks.data() + r * W,
                                       flags[static_cast<size_t>(2 * r + 1)],
                                       bias_ids.data() + r * sampling::kMaxLogitBias,
                                       bias_values.data() + r * sampling::kMaxLogitBias);
        for (int64_t v = 0; v < V; ++v)
            ASSERT_EQ(got[static_cast<size_t>(r * V + v)], want[static_cast<size_t>(v)]) << "row " << r << ", " << v;
    }
    // The untouched row is bit for bit the input.
    for (int64_t v = 0; v < V; ++v) ASSERT_EQ(got[static_cast<size_t>(v)], logits[static_cast<size_t>(v)]);
}

// Every backend against the CPU backend (support/op_conformance.h), bit for bit: the four kinds of row of
// MatchesReference.
TEST_P(OpConformance, AdjustLogitsMatchesTheCpuReference) {
    using namespace conformance;
    const int64_t R = 4, V = 1003, W = sampling::mask_words(V), B = sampling::kMaxLogitBias;
    const std::vector<uint32_t> masks = random_masks(R, W, 8);
    std::vector<int32_t> bias_ids(static_cast<size_t>(R * B));
    std::vector<float> bias_values(bias_ids.size());
    for (size_t i = 0; i < bias_ids.size(); ++i) {
        bias_ids[i] = static_cast<int32_t>(rng_() % (V + 20)) - 10;
        bias_values[i] = static_cast<float>(static_cast<int>(rng_() % 2001) - 1000) / 10.0f;
    }
    check({{"adjust_logits",
            {f32("logits", R, V, random_logits(R * V, 7)), i32("flags", R, 2, {0, 0, 1, 0, 0, static_cast<int32_t>(B), 1, 7}),
             host("mask", DType::I32, R, W, masks), i32("bias_ids", R, B, bias_ids), f32("bias_values", R, B, bias_values)},
            {0},
            0.0,
            [](Backend& be, const Bound& b) { be.adjust_logits(b.t[0], LogitAdjustIo{b.t[1], b.t[2], b.t[3], b.t[4]}); }}});
}

TEST(AdjustLogits, MaskedTokensAreNeverSampledUnderAnySetting) {
    const int64_t V = 96, W = sampling::mask_words(V);
    std::vector<RowParams> settings = {params(0.0f),          params(1.0f),
                                       params(2.0f, 5),       params(1.0f, 0, 0.9f),
                                       params(1.0f, 0, 1.0f, 0.05f), params(0.7f, 40, 0.95f, 0.02f)};
    RowParams penalised = params(1.0f);
    penalised.repetition_penalty = 1.3f;
    penalised.presence_penalty = 1.5f;
    penalised.frequency_penalty = -2.0f;  // pushes generated tokens up
    settings.push_back(penalised);
    RowParams with_logprobs = params(1.0f, 3);
    with_logprobs.logprobs = 5;
    settings.push_back(with_logprobs);
    const int64_t R = static_cast<int64_t>(settings.size());
    for (int i = 0; i < R; ++i) settings[static_cast<size_t>(i)].seed_lo = 100u + static_cast<uint32_t>(i);
    cpu::CpuBackend be(2);
    SampleOp op(be, R, V);
    // The best logits of every row are its masked ones: the mask allows only odd tokens, and even tokens lead.
    std::vector<float> logits(static_cast<size_t>(R * V));
    for (int64_t i = 0; i < R * V; ++i)
        logits[static_cast<size_t>(i)] = (i % 2 == 0) ? 10.0f : -static_cast<float>(i % 7);
    const std::vector<uint32_t> masks(static_cast<size_t>(R * W), 0xAAAAAAAAu);
    std::vector<int32_t> flags;
    for (int64_t r = 0; r < R; ++r) flags.insert(flags.end(), {1, 0});
    op.set_adjust(flags, masks, std::vector<int32_t>(static_cast<size_t>(R * sampling::kMaxLogitBias), 0),
                  std::vector<float>(static_cast<size_t>(R * sampling::kMaxLogitBias), 0.0f));
    op.set(logits, settings, no_counts(R * V), 0);
    for (int32_t step = 0; step < 300; ++step) {
        op.set_logits(logits, step);
        const std::vector<int32_t> ids = op.run();
        for (int64_t r = 0; r < R; ++r) {
            ASSERT_EQ(ids[static_cast<size_t>(r)] % 2, 1) << "setting " << r << " step " << step;
        }
        const std::vector<float> lp = op.logprobs();
        const size_t row = static_cast<size_t>(R - 1) * (1 + sampling::kMaxLogprobs);
        ASSERT_TRUE(std::isfinite(lp[row])) << "the chosen token's logprob";
    }
}

TEST(AdjustLogits, BiasMinus100BansAndPlus100Forces) {
    const int64_t V = 50, R = 2;
    cpu::CpuBackend be(2);
    SampleOp op(be, R, V);
    std::vector<float> logits(static_cast<size_t>(R * V), 0.0f);
    logits[3] = 5.0f;        // row 0's best, banned
    logits[V + 9] = -5.0f;   // row 1's forced token starts low
    std::vector<int32_t> ids(static_cast<size_t>(R * sampling::kMaxLogitBias), 0);
    std::vector<float> values(ids.size(), 0.0f);
    ids[0] = 3;
    values[0] = -100.0f;
    ids[sampling::kMaxLogitBias] = 9;
    values[sampling::kMaxLogitBias] = 100.0f;
    op.set_adjust({0, 1, 0, 1}, std::vector<uint32_t>(static_cast<size_t>(R * sampling::mask_words(V)), 0), ids,
                  values);
    op.set(logits, {params(1.0f, 0, 1.0f, 0.0f, 5), params(1.0f, 0, 1.0f, 0.0f, 6)}, no_counts(R * V), 0);
    for (int32_t step = 0; step < 200; ++step) {
        op.set_logits(logits, step);
        const std::vector<int32_t> got = op.run();
        ASSERT_NE(got[0], 3);
        ASSERT_EQ(got[1], 9);
    }
}

TEST(AdjustLogits, MasksRewrittenBetweenReplaysEqualEagerCalls) {
    const int64_t R = 3, V = 2000, W = sampling::mask_words(V);
    cpu::CpuBackend be(2);
    SampleOp eager(be, R, V), replayed(be, R, V);
    const std::vector<RowParams> ps = {params(0.0f), params(0.8f, 40, 0.95f, 0.0f, 2), params(1.0f, 0, 0.9f, 0.0f, 3)};
    const std::vector<float> logits = random_logits(R * V, 11);
    std::vector<int32_t> bias_ids(static_cast<size_t>(R * sampling::kMaxLogitBias), 0);
    std::vector<float> bias_values(bias_ids.size(), 0.0f);
    bias_ids[0] = 17;
    bias_values[0] = 30.0f;
    for (SampleOp* op : {&eager, &replayed}) op->set(logits, ps, no_counts(R * V), 0);
    replayed.set_adjust(std::vector<int32_t>(2 * R, 0), std::vector<uint32_t>(static_cast<size_t>(R * W), 0), bias_ids,
                        bias_values);
    replayed.capture();
    for (int32_t s = 0; s < 40; ++s) {
        // Row 0: bias and a changing mask; row 1: mask on every other step; row 2: untouched.
        const std::vector<int32_t> flags = {1, 1, s % 2, 0, 0, 0};
        const std::vector<uint32_t> masks = random_masks(R, W, 100u + static_cast<uint32_t>(s));
        for (SampleOp* op : {&eager, &replayed}) {
            op->set_logits(logits, s);
            op->set_adjust(flags, masks, bias_ids, bias_values);
        }
        const std::vector<int32_t> want = eager.run();
        replayed.replay();
        ASSERT_EQ(replayed.ids(), want) << "step " << s;
        ASSERT_EQ(replayed.logits(), eager.logits());
        for (int64_t r = 0; r < 2; ++r) {
            if (flags[static_cast<size_t>(2 * r)] == 0) continue;
            ASSERT_TRUE(sampling::mask_allows(masks.data() + r * W, want[static_cast<size_t>(r)])) << "row " << r;
        }
    }
}

TEST(AdjustLogits, ChecksItsArguments) {
    cpu::CpuBackend be(1);
    SampleOp op(be, 2, 64);
    LogitAdjustIo io = op.adjust_io();
    io.mask = io.mask.slice_rows(0, 1);
    EXPECT_THROW(be.adjust_logits(op.logits_tensor(), io), std::invalid_argument);
    io = op.adjust_io();
    io.flags = io.flags.slice_rows(0, 1);
    EXPECT_THROW(be.adjust_logits(op.logits_tensor(), io), std::invalid_argument);
}

}  // namespace
}  // namespace tracelm
