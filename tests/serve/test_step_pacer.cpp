// The prompt-piece budget of a scheduler step, against the arithmetic of serve/step_pacer.h.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "serve/step_pacer.h"

namespace tracelm::serve {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kStretch = 1.75;

TEST(StepPacer, UnboundedWhenNothingDecodesOrTheCostIsUnknownOrNoStretchIsSet) {
    StepPacer p(kStretch);
    EXPECT_EQ(p.piece_seconds(0, 16), kInf);
    EXPECT_EQ(p.piece_seconds(8, 16), kInf);  // no cost of the 16-row step yet
    p.seed_decode(16, 0.040);
    EXPECT_EQ(p.piece_seconds(0, 16), kInf);  // no stream waits
    EXPECT_EQ(p.tokens_for(0.5, 29), 29);     // no cost per token yet: the token cap
    EXPECT_EQ(p.tokens_for(kInf, 29), 29);
    StepPacer off(0);
    off.seed_decode(16, 0.040);
    off.seed_decode(8, 0.020);
    EXPECT_EQ(off.piece_seconds(8, 16), kInf);
}

TEST(StepPacer, PiecesGetTheStretchOfTheRunningSetsStepLessTheDecode) {
    StepPacer p(kStretch);
    p.seed_decode(16, 0.040);
    p.seed_decode(4, 0.012);
    EXPECT_DOUBLE_EQ(p.piece_seconds(4, 16), kStretch * 0.040 - 0.012);
    EXPECT_DOUBLE_EQ(p.piece_seconds(16, 16), (kStretch - 1) * 0.040);
    // A decode step that costs more than the stretch leaves no time (the scheduler's floor still makes progress).
    p.seed_decode(8, 0.090);
    EXPECT_EQ(p.piece_seconds(8, 16), 0.0);
}

TEST(StepPacer, RealStepsAverageAndScaleTheSeedsOfBucketsNotRunYet) {
    StepPacer p(kStretch);
    p.seed_decode(8, 0.010);
    p.seed_decode(16, 0.020);
    EXPECT_DOUBLE_EQ(p.decode_cost(16), 0.020);
    p.decode_done(8, 0.015);  // real steps cost 1.5x their inert start-up replay
    EXPECT_DOUBLE_EQ(p.decode_cost(8), 0.015);
    EXPECT_DOUBLE_EQ(p.decode_cost(16), 0.020 * 1.5);
    p.decode_done(8, 0.005);  // later steps move the average only, not the scale
    EXPECT_DOUBLE_EQ(p.decode_cost(8), 0.015 + 0.1 * (0.005 - 0.015));
    EXPECT_DOUBLE_EQ(p.decode_cost(16), 0.020 * 1.5);
    p.decode_done(16, 0.050);
    EXPECT_DOUBLE_EQ(p.decode_cost(16), 0.050);
    p.decode_done(32, 0.100);  // a bucket without a seed
    EXPECT_DOUBLE_EQ(p.decode_cost(32), 0.100);
    EXPECT_EQ(p.decode_cost(4), 0.0);
}

TEST(StepPacer, PiecesOfOneSizeGiveAProportionalCost) {
    StepPacer p(kStretch);
    p.piece_done(10, 0.020);
    EXPECT_DOUBLE_EQ(p.piece_per_token(), 0.002);
    EXPECT_EQ(p.piece_fixed(), 0.0);
    EXPECT_EQ(p.tokens_for(0.0099, 100), 4);
    EXPECT_EQ(p.tokens_for(0.0099, 3), 3);  // the token cap still holds
    EXPECT_EQ(p.tokens_for(0.0, 100), 0);
    EXPECT_EQ(p.tokens_for(kInf, 100), 100);
    p.piece_done(10, 0.040);
    EXPECT_DOUBLE_EQ(p.piece_per_token(), (0.020 + 0.25 * (0.040 - 0.020)) / 10);
}

TEST(StepPacer, PiecesOfSeveralSizesFitTheFixedCostAndTheCostPerToken) {
    // Exact costs a + b * n: the least-squares fit over the moving averages recovers a and b.
    const double a = 0.025, b = 0.004;
    StepPacer p(kStretch);
    for (const int n : {13, 4, 13, 4, 20, 6}) p.piece_done(n, a + b * n);
    EXPECT_NEAR(p.piece_per_token(), b, 1e-12);
    EXPECT_NEAR(p.piece_fixed(), a, 1e-12);
    // 0.1 s fits (0.1 - a) / b = 18.75 tokens in one forward; less than the fixed cost and one token fits none.
    EXPECT_EQ(p.tokens_for(0.1, 100), 18);
    EXPECT_EQ(p.tokens_for(a + 0.5 * b, 100), 0);
    EXPECT_EQ(p.tokens_for(-1.0, 100), 0);
}

// Pieces in a decode step's forward (what they add to the step) are fitted apart from pieces of their own, whose
// fixed cost includes a pass over the weights; until one was measured, the pieces of their own size them.
TEST(StepPacer, PiecesInADecodeStepAreFittedApart) {
    StepPacer p(kStretch);
    constexpr auto kOwn = PieceForward::Own, kMixed = PieceForward::DecodeStep;
    EXPECT_EQ(p.tokens_for(0.1, 100, kMixed), 100);
    for (const int n : {13, 4, 13, 4, 20, 6}) p.piece_done(n, 0.025 + 0.004 * n, kOwn);
    EXPECT_EQ(p.tokens_for(0.1, 100, kMixed), 18);  // (0.1 - 0.025) / 0.004 = 18.75
    for (const int n : {13, 4, 13, 4, 20, 6}) p.piece_done(n, 0.001 + 0.003 * n, kMixed);
    EXPECT_NEAR(p.piece_fixed(kMixed), 0.001, 1e-12);
    EXPECT_NEAR(p.piece_per_token(kMixed), 0.003, 1e-12);
    EXPECT_EQ(p.tokens_for(0.0995, 100, kMixed), 32);  // (0.0995 - 0.001) / 0.003 = 32.8
    // The pieces of their own keep their fit.
    EXPECT_NEAR(p.piece_fixed(kOwn), 0.025, 1e-12);
    EXPECT_NEAR(p.piece_per_token(kOwn), 0.004, 1e-12);
    EXPECT_EQ(p.tokens_for(0.1, 100, kOwn), 18);
}

TEST(StepPacer, AnAbsurdFitFallsBackToTheProportionalCost) {
    StepPacer p(kStretch);
    p.piece_done(4, 0.040);  // bigger pieces faster: a negative slope
    p.piece_done(20, 0.020);
    const double n = 4 + 0.25 * (20 - 4), t = 0.040 + 0.25 * (0.020 - 0.040);
    EXPECT_DOUBLE_EQ(p.piece_per_token(), t / n);
    EXPECT_NEAR(p.piece_fixed(), 0.0, 1e-15);
}

TEST(StepPacer, ThePromptRateIsAMovingAverageOfTokensAdmittedPerStep) {
    StepPacer p(kStretch);
    EXPECT_EQ(p.prompt_rate(), 0.0);
    p.prompts_admitted(1000);
    p.prompts_admitted(280);
    EXPECT_EQ(p.prompt_rate(), 0.0);  // counted at the step's end
    p.step_ended();
    EXPECT_DOUBLE_EQ(p.prompt_rate(), 1280.0 / 128);
    p.step_ended();  // nothing admitted
    EXPECT_DOUBLE_EQ(p.prompt_rate(), 1280.0 / 128 * 127 / 128);
    // Steady arrivals of 280 tokens every 4 steps settle at 70 a step.
    for (int i = 0; i < 4000; ++i) {
        if (i % 4 == 0) p.prompts_admitted(280);
        p.step_ended();
    }
    EXPECT_NEAR(p.prompt_rate(), 70.0, 3.0);
}

TEST(EvenPrefill, EachPromptIsSpreadOverTheStepsLeftToIt) {
    EXPECT_EQ(even_prefill_tokens({}), 0);
    EXPECT_EQ(even_prefill_tokens({{280, 8}}), 35);
    EXPECT_EQ(even_prefill_tokens({{281, 8}}), 36);  // rounded up: done by its step, not one after
    EXPECT_EQ(even_prefill_tokens({{50, 1}}), 50);
    // Due or overdue: all of it now.
    EXPECT_EQ(even_prefill_tokens({{50, 0}}), 50);
    EXPECT_EQ(even_prefill_tokens({{50, -3}}), 50);
}

TEST(MixedPrefill, TheStretchBoundsAWaveButNotTheRatePromptsArriveAt) {
    // paced: what the stretch allows; even: the prompts' even spread; then the arrival rate and the token budget.
    EXPECT_EQ(mixed_prefill_tokens(100, 40, 10.0, 512), 40);  // the even spread, within the stretch
    EXPECT_EQ(mixed_prefill_tokens(30, 54, 10.0, 512), 30);   // a wave: the stretch bounds it
    EXPECT_EQ(mixed_prefill_tokens(30, 54, 0.0, 512), 30);
    // Steady traffic that needs more than the stretch allows gets 1.5 times its rate (rounded up) all the same...
    EXPECT_EQ(mixed_prefill_tokens(20, 54, 70.0, 512), 105);
    EXPECT_EQ(mixed_prefill_tokens(20, 54, 70.1, 512), 106);
    // ...within the step's token budget.
    EXPECT_EQ(mixed_prefill_tokens(20, 54, 70.0, 80), 80);
    // The rate lifts a spread slower than it even where the stretch would allow more.
    EXPECT_EQ(mixed_prefill_tokens(200, 8, 10.0, 512), 15);
}

TEST(EvenPrefill, APromptWaitsForThoseBeforeIt) {
    // FCFS: the second prompt is computed after the first, so its rate covers both; the first's own is lower.
    EXPECT_EQ(even_prefill_tokens({{100, 8}, {300, 2}}), 200);
    // A later prompt with steps to spare does not lower the first one's rate.
    EXPECT_EQ(even_prefill_tokens({{100, 2}, {300, 100}}), 50);
    EXPECT_EQ(even_prefill_tokens({{100, 8}, {300, 8}, {8, 1}}), 408);
}

}  // namespace
}  // namespace tracelm::serve
