// Prompt scoring (Engine::admit's prompt_logprobs): each prompt token's log-probability given the tokens before it,
// against a second implementation, the last-row logits of a prefill of that prefix alone (Engine::start) turned
// into a log-softmax in double on the host; the n best as that log-softmax ranks them. Scoring changes nothing the
// row generates, and no block of a scored prompt is shared from the prefix cache (its positions must be computed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/engine.h"
#include "support/scheduler_support.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

// Prefills `prompt` in pieces of at most `budget` tokens, then decodes `steps` greedy tokens.
std::vector<int32_t> generate(Engine& e, int row, int64_t budget, int steps) {
    int32_t first = -1;
    while (!e.prefill(row, &first, budget)) {
    }
    std::vector<int32_t> out = {first};
    for (int i = 0; i < steps; ++i) {
        EXPECT_TRUE(e.grow().empty());
        e.step();
        out.push_back(e.sampled()[static_cast<size_t>(row)]);
    }
    return out;
}

TEST(PromptScores, EachTokenScoresAsTheLogSoftmaxOfItsPrefixAlone) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    EngineOptions o;
    o.max_seqs = 2;
    o.context = 128;
    const std::vector<int32_t> prompt = testing::prompt_of(5, 41);  // more rows than a scoring group, cut in pieces
    const auto n = static_cast<int64_t>(prompt.size());
    constexpr int kBest = 5, kSteps = 6;

    Engine plain(*model, be, o);
    const std::vector<int32_t> want =
        generate(plain, plain.admit(prompt, {}, sampling::RowParams{}, n + kSteps + 1), 7, kSteps);
    // The prompt's blocks are now in plain's prefix cache; a scored admission must still compute them.
    const int64_t hits = plain.prefix_stats().hit_tokens;
    const int row = plain.admit(prompt, {}, sampling::RowParams{}, n + kSteps + 1, {}, kBest);
    EXPECT_EQ(plain.prefix_stats().hit_tokens, hits);
    EXPECT_TRUE(plain.take_prompt_logprobs(row).empty()) << "nothing before the prompt is computed";
    EXPECT_EQ(generate(plain, row, 7, kSteps), want) << "scoring changed the generated tokens";
    const std::vector<sampling::TokenLogprobs> scores = plain.take_prompt_logprobs(row);
    ASSERT_EQ(static_cast<int64_t>(scores.size()), n - 1);
    EXPECT_TRUE(plain.take_prompt_logprobs(row).empty()) << "given once";

    Engine ref(*model, be, o);
    const int64_t V = model->config().vocab_size;
    for (int64_t i = 1; i < n; ++i) {
        SCOPED_TRACE(::testing::Message() << "prompt token " << i);
        ref.start({std::vector<int32_t>(prompt.begin(), prompt.begin() + i)}, 1);
        const std::vector<float> x = ref.logits();
        ref.finish();
        ASSERT_EQ(static_cast<int64_t>(x.size()), V);
        const double m = *std::max_element(x.begin(), x.end());
        double z = 0;
        for (const float v : x) z += std::exp(static_cast<double>(v) - m);
        const auto lsm = [&](int32_t v) { return static_cast<double>(x[static_cast<size_t>(v)]) - m - std::log(z); };
        std::vector<int32_t> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });

        const sampling::TokenLogprobs& s = scores[static_cast<size_t>(i - 1)];
        EXPECT_EQ(s.id, prompt[static_cast<size_t>(i)]);
        EXPECT_NEAR(s.logprob, lsm(s.id), 1e-3);
        ASSERT_EQ(s.top.size(), static_cast<size_t>(kBest));
        for (int j = 0; j < kBest; ++j) {
            EXPECT_EQ(s.top[static_cast<size_t>(j)].first, order[static_cast<size_t>(j)]) << j;
            EXPECT_NEAR(s.top[static_cast<size_t>(j)].second, lsm(order[static_cast<size_t>(j)]), 1e-3) << j;
        }
    }
}

TEST(PromptScores, AnOutOfRangeCountIsRefused) {
    cpu::CpuBackend be(1);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    Engine e(*model, be, EngineOptions{});
    EXPECT_THROW(e.admit({1, 2}, {}, sampling::RowParams{}, 4, {}, 21), std::invalid_argument);
    EXPECT_THROW(e.admit({1, 2}, {}, sampling::RowParams{}, 4, {}, -2), std::invalid_argument);
}

}  // namespace
}  // namespace tracelm
