// Sampling inside the engine's captured decode step (engine/engine.h) on the CPU backend and a generated
// checkpoint: temperature 0 is greedy bit for bit, seeded sampling replays as it ran eagerly and the replays allocate
// nothing, rows are independent, the penalty counts advance on the device, and logprobs match the logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "ops/sampling/sampling.h"
#include "support/sampling_support.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using sampling::RowParams;
using testing::params;

const std::vector<std::vector<int32_t>> kSamplingPrompts = {{785, 6722, 315, 9625, 374}, {9707, 11, 1879, 0}, {151, 872, 198}};

std::unique_ptr<Model> tiny(Backend& be) { return Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be); }

EngineOptions engine_options(int seqs, int64_t context, bool capture) {
    EngineOptions opt;
    opt.max_seqs = seqs;
    opt.context = context;
    opt.capture = capture;
    return opt;
}

// First token and `steps` decode steps of each sequence, sequence-major.
std::vector<std::vector<int32_t>> decode(Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<RowParams>& ps, int steps) {
    const std::vector<int32_t> first = e.start(prompts, steps + 1, ps);
    for (int i = 0; i < steps; ++i) e.step();
    const std::vector<int32_t> h = e.history(steps);
    std::vector<std::vector<int32_t>> out(prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
        out[s].push_back(first[s]);
        for (int i = 0; i < steps; ++i) out[s].push_back(h[static_cast<size_t>(i) * prompts.size() + s]);
    }
    return out;
}

TEST(SamplingEngine, TemperatureZeroIsGreedyBitForBit) {
    cpu::CpuBackend be(2);
    const auto model = tiny(be);
    Engine greedy(*model, be, engine_options(3, 128, true)), zero(*model, be, engine_options(3, 128, true));
    const std::vector<RowParams> ps(3, params(0.0f, 5, 0.5f, 0.1f, 9));
    EXPECT_EQ(decode(greedy, kSamplingPrompts, {}, 40), decode(zero, kSamplingPrompts, ps, 40));
}

// The same seeds give the same tokens eagerly and replayed over 300 steps (20 KV blocks), for 1 and 3 sequences with
// different parameters per row; the replays allocate nothing. Under AddressSanitizer 100 steps (7 blocks), the same
// code paths: 300 took 50 s there, most of it in the 151,936-entry LM head and sampling over it.
TEST(SamplingEngine, SeededSamplingReplaysAsEager) {
#if defined(__SANITIZE_ADDRESS__)
    constexpr int kSteps = 100;
#else
    constexpr int kSteps = 300;
#endif
    cpu::CpuBackend be(2);
    const auto model = tiny(be);
    std::vector<RowParams> ps = {params(0.8f, 40, 0.95f, 0.0f, 42), params(1.0f, 0, 0.9f, 0.0f, 7),
                                 params(1.3f, 0, 1.0f, 0.05f, 1234567890123ull)};
    ps[1].repetition_penalty = 1.2f;
    ps[2].frequency_penalty = 0.5f;
    ps[2].presence_penalty = 0.3f;
    for (const int S : {1, 3}) {
        SCOPED_TRACE(S);
        const std::vector<std::vector<int32_t>> prompts(kSamplingPrompts.begin(), kSamplingPrompts.begin() + S);
        const std::vector<RowParams> rows(ps.begin(), ps.begin() + S);
        Engine eager(*model, be, engine_options(S, kSteps + 20, false)),
            replay(*model, be, engine_options(S, kSteps + 20, true));
        const auto greedy = decode(eager, prompts, {}, 30);
        const auto want = decode(eager, prompts, rows, kSteps);
        replay.start(prompts, kSteps + 1, rows);
        replay.step();
        replay.step();
        const uint64_t before = testing::heap_allocations().load();
        for (int i = 2; i < kSteps; ++i) replay.step();
        EXPECT_EQ(testing::heap_allocations().load() - before, 0u);
        EXPECT_EQ(replay.replays(), kSteps - 1);
        const std::vector<int32_t> h = replay.history(kSteps);
        for (int s = 0; s < S; ++s) {
            for (int i = 0; i < kSteps; ++i)
                ASSERT_EQ(h[static_cast<size_t>(i * S + s)], want[static_cast<size_t>(s)][static_cast<size_t>(i + 1)]);
            // Sampling really happened: the first 31 tokens are not the greedy ones.
            const auto& w = want[static_cast<size_t>(s)];
            EXPECT_NE(std::vector<int32_t>(w.begin(), w.begin() + 31), greedy[static_cast<size_t>(s)]);
        }
    }
}

// A row's tokens do not change when the other rows of its batch (or the batch size) change.
TEST(SamplingEngine, RowsAreIndependent) {
    cpu::CpuBackend be(2);
    const auto model = tiny(be);
    Engine e(*model, be, engine_options(3, 128, true));
    const RowParams a = params(0.9f, 20, 0.9f, 0.0f, 5);
    const auto alone = decode(e, {kSamplingPrompts[0]}, {a}, 30);
    const auto batch1 = decode(e, kSamplingPrompts, {a, params(1.0f, 0, 1.0f, 0.0f, 6), params(0.0f)}, 30);
    RowParams b = params(2.0f, 3, 0.5f, 0.2f, 99);
    b.repetition_penalty = 2.0f;
    const auto batch2 = decode(e, {kSamplingPrompts[0], kSamplingPrompts[2], kSamplingPrompts[1]}, {a, b, params(0.7f, 0, 0.8f, 0.0f, 1)}, 30);
    EXPECT_EQ(batch1[0], alone[0]);
    EXPECT_EQ(batch2[0], alone[0]);
    EXPECT_NE(batch1[1], batch2[1]);
}

// The counts the penalties read are advanced by the graph: with a huge presence penalty greedy decoding never
// repeats a generated token, where without it it does.
TEST(SamplingEngine, PenaltyCountsAdvanceOnDevice) {
    cpu::CpuBackend be(2);
    const auto model = tiny(be);
    Engine e(*model, be, engine_options(1, 128, true));
    const auto plain = decode(e, {kSamplingPrompts[0]}, {params(0.0f)}, 60)[0];
    EXPECT_LT(std::set<int32_t>(plain.begin(), plain.end()).size(), plain.size());
    RowParams p = params(0.0f);
    p.presence_penalty = 1e6f;
    const auto penalised = decode(e, {kSamplingPrompts[0]}, {p}, 60)[0];
    EXPECT_EQ(std::set<int32_t>(penalised.begin(), penalised.end()).size(), penalised.size());
    EXPECT_GT(e.replays(), 0);
}

// Engine::logprobs against a double-precision log-softmax of the downloaded logits, at every decode step (the
// logits buffer holds one sequence's prefill logits at a time, so the prefill token is left to the op tests).
TEST(SamplingEngine, LogprobsMatchDownloadedLogits) {
    cpu::CpuBackend be(2);
    const auto model = tiny(be);
    Engine e(*model, be, engine_options(2, 64, true));
    RowParams p = params(0.8f, 40, 0.95f, 0.0f, 3);
    p.logprobs = 5;
    e.start({kSamplingPrompts[0], kSamplingPrompts[1]}, 21, {p, params(1.0f, 0, 1.0f, 0.0f, 4)});
    for (int step = 1; step <= 20; ++step) {
        e.step();
        const std::vector<sampling::TokenLogprobs> lps = e.logprobs();
        const std::vector<float> logits = e.logits();
        const int64_t V = static_cast<int64_t>(logits.size()) / 2;
        const float* row = logits.data();
        double m = -INFINITY, z = 0;
        for (int64_t v = 0; v < V; ++v) m = std::max(m, double(row[v]));
        for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - m);
        auto lsm = [&](int32_t v) { return row[v] - m - std::log(z); };
        ASSERT_EQ(lps[0].id, e.sampled()[0]);
        EXPECT_NEAR(lps[0].logprob, lsm(lps[0].id), 1e-4);
        ASSERT_EQ(lps[0].top.size(), 5u);
        std::vector<int32_t> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                          [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
        for (size_t i = 0; i < 5; ++i) {
            EXPECT_EQ(lps[0].top[i].first, order[i]);
            EXPECT_NEAR(lps[0].top[i].second, lsm(order[i]), 1e-4);
        }
        EXPECT_TRUE(lps[1].top.empty());
    }
}

}  // namespace
}  // namespace tracelm
