// Prefill chunking: where a prompt is cut into forwards changes no bit, as long as no piece is a single row where the
// whole prompt in one forward has several (attention picks its dot order by one row vs several, docs/ggml-numerics.md;
// the matmuls of every piece sum in the order of the whole forward's rows, which for Gemma 3's K-quant weights is
// ggml's tiled order, and vec_dot's for pieces of a forward of fewer than 8 rows).
// The server relies on this to cut prompts by the step's token budget (serve/scheduler.h).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "engine/engine.h"
#include "support/engine_trace.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using testing::expect_same;
using testing::random_tokens;
using testing::Trace;

// Prefills `prompt` through the row API, each forward at most `budget` tokens, then decodes `steps` tokens.
Trace run_budgeted(Engine& e, const std::vector<int32_t>& prompt, int64_t budget, int steps,
                   std::vector<int64_t>* pieces) {
    Trace t;
    const int row = e.admit(prompt, {}, sampling::RowParams{}, static_cast<int64_t>(prompt.size()) + steps + 1);
    EXPECT_EQ(row, 0);
    int32_t first = -1;
    for (bool joined = false; !joined;) {
        const int64_t n = e.next_prefill_tokens(row, budget);
        EXPECT_GE(n, 1) << "a budget of " << budget << " tokens always makes progress on a lone prompt";
        if (n < 1) return t;
        if (pieces) pieces->push_back(n);
        joined = e.prefill(row, &first, budget);
    }
    t.tokens.push_back(first);
    t.logits.push_back(e.logits());
    for (int i = 0; i < steps; ++i) {
        EXPECT_TRUE(e.grow().empty());
        e.step();
        t.tokens.push_back(e.sampled()[0]);
        t.logits.push_back(e.logits());
    }
    e.release(row);
    return t;
}

enum class ModelKind { Tiny, SmolLM2, Gemma3 };

struct ChunkCase {
    const char* name;
    ModelKind model;
    DType kv;
};

class PrefillChunks : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(PrefillChunks, BudgetCutsChangeNoBitOfTokensOrLogits) {
    if (GetParam().model == ModelKind::SmolLM2) TRACELM_NEED_SMOLLM2();
    if (GetParam().model == ModelKind::Gemma3) TRACELM_NEED_GEMMA3();
    cpu::CpuBackend be(2);
    const auto model = Model::load(GetParam().model == ModelKind::SmolLM2  ? testing::smollm2_gguf_path()
                                   : GetParam().model == ModelKind::Gemma3 ? testing::gemma3_gguf_path()
                                                                        : testing::generated_checkpoint("tiny", 11, DType::F32),
                                   be);
    EngineOptions o;
    o.kv_dtype = GetParam().kv;
    o.context = 512;
    o.prefix_cache = false;
    Engine e(*model, be, o);
    const int64_t V = model->config().vocab_size;
    // 150 tokens: one forward of 150 rows unbudgeted; 161 = 3 * 53 + 2 ends on a two-row piece at budget 53.
    for (const int n : {150, 161}) {
        const auto prompt = random_tokens(n, V, static_cast<uint32_t>(n));
        const Trace whole = run_budgeted(e, prompt, 512, 4, nullptr);
        for (const int64_t budget : {53, 5}) {
            std::vector<int64_t> pieces;
            const Trace cut = run_budgeted(e, prompt, budget, 4, &pieces);
            for (const int64_t p : pieces) EXPECT_GE(p, 2) << "no single-row piece of a multi-row chunk";
            EXPECT_GT(pieces.size(), 1u);
            expect_same(whole, cut, std::to_string(n) + " tokens at a budget of " + std::to_string(budget));
        }
    }
    // A 12-row forward (ggml's tiled order for K-quant weights) cut into pieces of fewer than 8 rows, and a 7-row one
    // (vec_dot's order) cut too, give the bits of the whole.
    for (const int n : {12, 7}) {
        const auto prompt = random_tokens(n, V, static_cast<uint32_t>(n));
        const Trace whole = run_budgeted(e, prompt, 512, 2, nullptr);
        std::vector<int64_t> pieces;
        const Trace cut = run_budgeted(e, prompt, 3, 2, &pieces);
        EXPECT_GT(pieces.size(), 2u);
        expect_same(whole, cut, std::to_string(n) + " tokens at a budget of 3");
    }
    // A three-row chunk cannot be cut into pieces of two rows: a budget of 2 waits for a larger one.
    const int row = e.admit(random_tokens(3, V, 3), {}, sampling::RowParams{}, 8);
    EXPECT_EQ(e.next_prefill_tokens(row, 2), 0);
    EXPECT_EQ(e.next_prefill_tokens(row, 3), 3);
    e.release(row);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefillChunks,
                         ::testing::Values(ChunkCase{"TinyF32", ModelKind::Tiny, DType::F32},
                                           ChunkCase{"TinyF16", ModelKind::Tiny, DType::F16},
                                           ChunkCase{"SmolLM2F16", ModelKind::SmolLM2, DType::F16},
                                           ChunkCase{"Gemma3F16", ModelKind::Gemma3, DType::F16}),
                         [](const auto& p) { return std::string(p.param.name); });

// K-type experts in the ggml numerics sum each expert's products by its rows in the whole forward (ops/moe/moe.h), so
// a forward's bits depend on all its tokens: the engine never cuts one, and shares a cached prefix only up to where
// forwards ended both in the new prompt and in the one that left the blocks. Either way the answer is the prompt's
// alone.
TEST(PrefillWholeForwards, KTypeExpertsAreNeverCutAndSharePrefixesOnlyToWholeForwards) {
    const testing::TempDir dir;
    cpu::CpuBackend be(2);
    // The ggml numerics: Q4_K experts as they are.
    const auto model = Model::load(testing::random_moe_gguf(dir, DType::Q4_K, "moe-small"), be);
    EngineOptions o;
    o.context = 256;
    o.prefill_chunk = 64;
    o.prefix_cache = false;
    const int64_t V = model->config().vocab_size;
    const auto prompt = random_tokens(150, V, 1);
    Trace want;
    {
        Engine e(*model, be, o);
        want = run_budgeted(e, prompt, 512, 3, nullptr);
        // Budgets smaller than a forward wait; the least that progresses is the forward's rest.
        const int row = e.admit(prompt, {}, sampling::RowParams{}, 160);
        std::vector<int64_t> pieces;
        int32_t first = -1;
        for (bool joined = false; !joined;) {
            EXPECT_EQ(e.next_prefill_tokens(row, 5), 0);
            const int64_t least = e.min_prefill_budget(row);
            pieces.push_back(e.next_prefill_tokens(row, least));
            joined = e.prefill(row, &first, least);
        }
        EXPECT_EQ(pieces, (std::vector<int64_t>{64, 64, 22}));
        EXPECT_EQ(first, want.tokens[0]);
        e.release(row);
    }
    o.prefix_cache = true;
    Engine e(*model, be, o);
    // A shares the prompt's first 100 tokens; its second forward [64, 140) held other tokens than the prompt's
    // [64, 128): only the first forward's 4 blocks are shared.
    std::vector<int32_t> a(prompt.begin(), prompt.begin() + 100);
    const auto tail = random_tokens(40, V, 2);
    a.insert(a.end(), tail.begin(), tail.end());
    run_budgeted(e, a, 512, 1, nullptr);
    int64_t hits = e.prefix_stats().hit_tokens;
    expect_same(want, run_budgeted(e, prompt, 512, 3, nullptr), "after a prompt sharing 100 tokens");
    EXPECT_EQ(e.prefix_stats().hit_tokens - hits, 64);
    // The prompt again: 9 of its blocks are cached, 8 end a forward (128 = 2 chunks).
    hits = e.prefix_stats().hit_tokens;
    expect_same(want, run_budgeted(e, prompt, 512, 3, nullptr), "after itself");
    EXPECT_EQ(e.prefix_stats().hit_tokens - hits, 128);
}

}  // namespace
}  // namespace tracelm
