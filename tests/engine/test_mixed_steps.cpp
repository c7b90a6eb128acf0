// Mixed steps (Engine::mixed_step, issue 35): a prompt piece computed in the same forward as the decode step of the
// running rows. A request whose prompt was computed beside decoding rows, and the rows that decoded beside its
// pieces, each give the tokens and logits of the request alone, greedy and seeded, on a dense checkpoint, one with
// sliding-window layers and a mixture-of-experts GGUF in both numerics.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using testing::random_tokens;

// A sequence's tokens (the first from its prefill, then one per decode step) and the logits each step gave it.
struct Run {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;
};

// The row's token and logits of the last step (V: the vocabulary).
void record_step(Engine& e, int row, int64_t V, Run& run) {
    const std::vector<int32_t> ids = e.sampled();
    const std::vector<float> all = e.logits();
    run.tokens.push_back(ids[static_cast<size_t>(row)]);
    run.logits.emplace_back(all.begin() + row * V, all.begin() + (row + 1) * V);
}

// The request alone: its prompt in whole forwards, then `steps` decode steps.
EngineOptions options(int block_size) {
    EngineOptions o;
    o.context = 256;
    o.max_seqs = 4;
    o.prefix_cache = false;
    o.block_size = block_size;
    return o;
}

Run alone(const Model& m, Backend& be, const std::vector<int32_t>& prompt, const sampling::RowParams& p, int steps,
          int block_size) {
    Engine e(m, be, options(block_size));
    const int row = e.admit(prompt, {}, p, static_cast<int64_t>(prompt.size()) + steps + 1);
    Run run;
    int32_t first = -1;
    while (!e.prefill(row, &first)) {
    }
    run.tokens.push_back(first);
    for (int i = 0; i < steps; ++i) {
        EXPECT_TRUE(e.grow().empty());
        e.step();
        record_step(e, row, m.config().vocab_size, run);
    }
    return run;
}

void expect_same(const Run& want, const Run& got, const std::string& what) {
    ASSERT_EQ(want.tokens, got.tokens) << what;
    ASSERT_EQ(want.logits.size(), got.logits.size()) << what;
    for (size_t i = 0; i < want.logits.size(); ++i)
        ASSERT_EQ(0, std::memcmp(want.logits[i].data(), got.logits[i].data(), want.logits[i].size() * sizeof(float)))
            << what << ": the logits of step " << i + 1;
}

void check_model(const Model& m, Backend& be, int block_size = 16) {
    const int64_t V = m.config().vocab_size;
    constexpr int kSteps = 12;
    // A (row 0) and D (row 2) decode from the start, beside G (row 1), which ends after one step; B's 40-token
    // prompt then goes into G's row in pieces of at most 9 tokens beside A's and D's steps, so the decoding rows of
    // those mixed steps are not the bucket's first rows (a mixed step's forward leaves row 1 and 3 out); C's 21-token
    // prompt (row 3) beside A's, B's and D's (greedy A, seeded B, C and D).
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(7, V, 1), random_tokens(40, V, 2),
                                                       random_tokens(21, V, 3), random_tokens(11, V, 4)};
    std::vector<sampling::RowParams> params(prompts.size());
    for (size_t i = 1; i < params.size(); ++i) {
        params[i].temperature = 0.8f;
        params[i].seed_lo = static_cast<uint32_t>(10 + i);
    }
    std::vector<Run> want;
    for (size_t i = 0; i < prompts.size(); ++i) want.push_back(alone(m, be, prompts[i], params[i], kSteps, block_size));

    Engine e(m, be, options(block_size));
    ASSERT_TRUE(e.can_mix());
    std::vector<Run> got(prompts.size());
    std::vector<int> rows(prompts.size(), -1);
    std::vector<bool> joined(prompts.size(), false);
    const auto admit = [&](size_t i) {
        rows[i] = e.admit(prompts[i], {}, params[i], static_cast<int64_t>(prompts[i].size()) + kSteps + 1);
        ASSERT_GE(rows[i], 0);
    };
    int32_t first = -1;
    const auto prefill_whole = [&](int row) {
        while (!e.prefill(row, &first)) {
        }
    };
    admit(0);
    prefill_whole(rows[0]);
    got[0].tokens.push_back(first);
    joined[0] = true;
    const int g = e.admit(random_tokens(5, V, 5), {}, {}, 5 + kSteps + 1);
    ASSERT_EQ(g, 1);
    prefill_whole(g);
    admit(3);
    ASSERT_EQ(rows[3], 2);
    prefill_whole(rows[3]);
    got[3].tokens.push_back(first);
    joined[3] = true;
    int mixed = 0;
    const auto done = [&](size_t i) { return got[i].tokens.size() >= static_cast<size_t>(kSteps + 1); };
    // Each loop is one step: a mixed one while a prompt is pending (B's pieces, then C's), else a decode step.
    for (int step = 0; !done(0); ++step) {
        if (step == 1) e.release(g);
        if (step == 2) {
            admit(1);
            ASSERT_EQ(rows[1], 1);
        }
        if (step == 5) admit(2);
        ASSERT_TRUE(e.grow().empty());
        const auto pending = [&](size_t i) { return rows[i] >= 0 && !joined[i]; };
        const size_t p = pending(1) ? 1 : pending(2) ? 2 : prompts.size();
        std::vector<bool> decoding = joined;
        if (p < prompts.size()) {
            joined[p] = e.mixed_step(rows[p], &first, 9);
            ++mixed;
            if (joined[p]) got[p].tokens.push_back(first);
        } else {
            e.step();
        }
        for (size_t i = 0; i < prompts.size(); ++i)
            if (decoding[i] && !done(i)) record_step(e, rows[i], V, got[i]);
    }
    // B and C decode on to their own kSteps.
    while (!done(1) || !done(2)) {
        ASSERT_TRUE(e.grow().empty());
        e.step();
        for (size_t i = 1; i < prompts.size(); ++i)
            if (!done(i)) record_step(e, rows[i], V, got[i]);
    }
    EXPECT_GE(mixed, 5 + 3);  // B's 40 tokens in pieces of at most 9, C's 21
    for (size_t i = 0; i < prompts.size(); ++i) expect_same(want[i], got[i], "request " + std::to_string(i));
}

TEST(MixedSteps, APromptBesideDecodingRowsAndTheRowsBesideItEachAnswerAsAlone) {
    cpu::CpuBackend be(2);
    {
        SCOPED_TRACE("tiny f32");
        const auto m = Model::load(testing::generated_checkpoint("tiny", 11, DType::F32), be);
        check_model(*m, be);
    }
    {
        // Sliding-window layers (window 8) in their own KV pool: with 4-token blocks the windows of the decoding
        // rows move to new blocks during mixed steps, and the pieces' windows span several.
        SCOPED_TRACE("tiny gemma3");
        const auto m = Model::load(testing::repo_path("testdata/models/tiny-gemma3"), be);
        ASSERT_EQ(m->config().sliding_window, 8);
        check_model(*m, be, 4);
    }
    const testing::TempDir dir;
    const std::string moe = testing::random_moe_gguf(dir, DType::Q8_0);
    for (const Numerics n : {Numerics::Ggml, Numerics::Fast}) {
        SCOPED_TRACE(n == Numerics::Fast ? "moe-tiny q8_0 fast" : "moe-tiny q8_0 ggml");
        const auto m = Model::load(moe, be, {}, n);
        check_model(*m, be);
    }
}

// Where a product's order depends on the forward's rows (K-type weights in the ggml numerics), steps are not mixed.
TEST(MixedSteps, ModelsWhoseProductsDependOnTheForwardsRowsDoNotMix) {
    cpu::CpuBackend be(2);
    const testing::TempDir dir;
    const std::string path = testing::random_moe_gguf(dir, DType::Q4_K, "moe-small");
    EngineOptions o;
    o.context = 64;
    const auto ggml = Model::load(path, be, {}, Numerics::Ggml);
    EXPECT_FALSE(Engine(*ggml, be, o).can_mix());
    const auto fast = Model::load(path, be, {}, Numerics::Fast);
    EXPECT_TRUE(Engine(*fast, be, o).can_mix());
}

}  // namespace
}  // namespace tracelm
