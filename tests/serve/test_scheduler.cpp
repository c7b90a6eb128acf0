// The continuous-batching scheduler (serve/scheduler.h) and the engine's row API under it: a request's tokens are
// what it produces alone (Engine::start, one sequence), whatever else runs, joins, leaves or is preempted; steady
// decode steps are replays with no host write; cancelled and finished sequences give their KV blocks back.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "serve/scheduler.h"
#include "support/engine_probe.h"
#include "support/scheduler_support.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using serve::Finish;
using serve::GenerationRequest;
using serve::Scheduler;
using serve::SchedulerOptions;
using testing::alone;
using testing::drain;
using testing::Outcome;
using testing::prompt_of;

sampling::RowParams seeded(uint32_t seed) {
    sampling::RowParams p;
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.seed_lo = seed;
    return p;
}

// Mixed prompt lengths (some longer than a prefill chunk), greedy and seeded rows, different lengths of output:
// requests join while others decode and leave at different steps.
std::vector<GenerationRequest> mixed_requests(int n, int max_new) {
    std::vector<GenerationRequest> rs;
    for (int i = 0; i < n; ++i) {
        GenerationRequest r;
        r.prompt = prompt_of(i, 3 + (i * 37) % 90);
        r.max_new_tokens = max_new - (i % 5) * 3;
        if (i % 3 == 1) r.params = seeded(1000u + static_cast<uint32_t>(i));
        rs.push_back(r);
    }
    return rs;
}

void expect_all_alone(const Model& model, Backend& be, const std::vector<GenerationRequest>& rs,
                      const std::vector<Outcome>& got, int64_t context) {
    for (size_t i = 0; i < rs.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "request " << i);
        EXPECT_EQ(got[i].finish, Finish::Length);
        EXPECT_EQ(got[i].tokens, alone(model, be, rs[i], context));
    }
}

std::vector<Outcome> run_all(Scheduler& s, const std::vector<GenerationRequest>& rs, int stagger_every = 0) {
    std::vector<std::shared_ptr<serve::Stream>> streams;
    for (size_t i = 0; i < rs.size(); ++i) {
        streams.push_back(s.submit(rs[i]));
        if (stagger_every > 0 && i % static_cast<size_t>(stagger_every) == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
        }
    }
    std::vector<Outcome> out;
    for (auto& st : streams) out.push_back(drain(*st));
    return out;
}

TEST(Scheduler, SixteenConcurrentRequestsEachCompleteAsAlone) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    SchedulerOptions o;
    o.max_seqs = 8;  // more requests than rows: later ones wait, then join as rows free up
    o.context = 256;
    o.max_batched_tokens = 32;  // prompts longer than this prefill over several steps, between decode steps
    Scheduler s(*model, be, o);
    const auto rs = mixed_requests(16, 24);
    const std::vector<Outcome> got = run_all(s, rs, 3);
    expect_all_alone(*model, be, rs, got, o.context);
    const serve::SchedulerStats st = s.stats();
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(st.waiting, 0);
    EXPECT_EQ(st.kv_blocks_used, 0);
    EXPECT_EQ(st.requests_finished, 16u);
    // Every bucket's graph was captured before the first request, so every step is a replay, from the first one,
    // except those that also computed a prompt piece (mixed steps, eager).
    EXPECT_GT(st.decode_steps, 0u);
    EXPECT_GT(st.mixed_steps, 0u);
    EXPECT_EQ(st.replays + st.mixed_steps, st.decode_steps);
    EXPECT_GT(st.steady_steps, 0u);
    EXPECT_EQ(st.ttft_seconds.count, 16u);
}

// A prompt that arrives while another request decodes is computed in the decode steps' forwards, spread evenly over
// SchedulerOptions::prefill_steps of them (here no stretch bounds the pieces), and answers as alone.
TEST(Scheduler, APromptIsSpreadOverPrefillStepsDecodeSteps) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    // (prefill steps, mixed steps for a 64-token prompt): 64 / 4 = 16 a step; 64 / 3 rounds up to 22, then 21, 21.
    for (const auto& [prefill_steps, pieces] : {std::pair{0, 1}, {3, 3}, {4, 4}}) {
        SCOPED_TRACE(prefill_steps);
        SchedulerOptions o;
        o.max_seqs = 2;
        o.context = 1200;
        o.max_step_stretch = 0;
        o.prefill_steps = prefill_steps;
        Scheduler s(*model, be, o);
        GenerationRequest running;  // decodes through the other's prefill; cancelled once that one is done
        running.prompt = prompt_of(1, 8);
        running.max_new_tokens = 1000;
        const auto first = s.submit(running);
        ASSERT_FALSE(first->next(std::chrono::seconds(30)).tokens.empty());  // it decodes (bounded wait)
        ASSERT_EQ(s.stats().mixed_steps, 0u);
        GenerationRequest joining;
        joining.prompt = prompt_of(2, 64);
        joining.max_new_tokens = 4;
        const Outcome got = drain(*s.submit(joining));
        EXPECT_EQ(s.stats().mixed_steps, static_cast<uint64_t>(pieces));
        first->cancel();
        drain(*first);
        EXPECT_EQ(got.tokens, alone(*model, be, joining, o.context));
    }
}

// Prompts admitted together while nothing decodes: once the first joins, it decodes while the next is computed in its
// decode steps' forwards (not a forward of its own after another, each a delay to the first stream's next token);
// both answer as alone. Unbounded in time (no stretch), so the pieces follow from the spread alone.
TEST(Scheduler, PromptsArrivingTogetherAtAnIdleServerGoIntoTheFirstOnesDecodeSteps) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    SchedulerOptions o;
    o.max_seqs = 2;
    o.context = 256;
    o.max_step_stretch = 0;
    o.prefill_steps = 4;
    Scheduler s(*model, be, o);
    std::vector<GenerationRequest> rs(2);
    rs[0].prompt = prompt_of(3, 40);
    rs[0].max_new_tokens = 16;
    rs[1].prompt = prompt_of(4, 64);
    rs[1].max_new_tokens = 4;
    std::vector<Outcome> got;
    for (const auto& st : s.submit(rs)) got.push_back(drain(*st));  // queued together: admitted in one step
    EXPECT_GE(s.stats().mixed_steps, 3u);
    expect_all_alone(*model, be, rs, got, o.context);
}

// A mixture-of-experts model (experts chosen on the device per row): 16 requests on 8 rows, each as alone.
TEST(Scheduler, MixtureOfExpertsRequestsEachCompleteAsAlone) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("moe-tiny", 7, DType::F32), be);
    SchedulerOptions o;
    o.max_seqs = 8;
    o.context = 256;
    o.max_batched_tokens = 32;
    Scheduler s(*model, be, o);
    const auto rs = mixed_requests(16, 16);
    expect_all_alone(*model, be, rs, run_all(s, rs, 3), o.context);
    EXPECT_GT(s.stats().mixed_steps, 0u);
    EXPECT_EQ(s.stats().replays + s.stats().mixed_steps, s.stats().decode_steps);
}

// A request's choices submitted together (n > 1): the later ones wait for the first one's prompt, then share its
// KV blocks through the prefix cache (each computes only the prompt's last, partial block), and each still produces
// what it produces alone. Without prefix caching nothing waits and nothing is shared.
TEST(Scheduler, ChoicesOfOnePromptShareItsBlocksAndEachAnswersAsAlone) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    std::vector<GenerationRequest> rs;
    for (uint32_t j = 0; j < 4; ++j) {
        GenerationRequest r;
        r.prompt = prompt_of(3, 100);  // six full 16-token blocks and 4 tokens
        r.max_new_tokens = 12;
        r.params = seeded(50 + j);
        rs.push_back(r);
    }
    GenerationRequest other;  // another prompt in the same group shares nothing
    other.prompt = prompt_of(4, 40);
    other.max_new_tokens = 12;
    rs.push_back(other);
    for (const bool cache : {true, false}) {
        SCOPED_TRACE(cache ? "prefix cache" : "no prefix cache");
        SchedulerOptions o;
        o.max_seqs = 8;
        o.context = 256;
        o.prefix_cache = cache;
        Scheduler s(*model, be, o);
        std::vector<Outcome> got;
        for (const auto& st : s.submit(rs)) got.push_back(drain(*st));
        expect_all_alone(*model, be, rs, got, o.context);
        EXPECT_NE(got[0].tokens, got[1].tokens);  // the choices are sampled apart
        EXPECT_EQ(s.stats().prefix_hit_tokens, cache ? 3u * 96 : 0u);
        EXPECT_EQ(s.stats().prompt_tokens, 4u * 100 + 40);
    }
}

// A KV pool of one context for 6 rows: sequences grow into each other's blocks, the newest is preempted and later
// recomputed (prompt in its chunks, its generated tokens one forward each), and still produces what it would alone.
TEST(Scheduler, PreemptedRequestsCompleteAsAlone) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::BF16), be);
    SchedulerOptions o;
    o.max_seqs = 6;
    o.context = 128;
    o.kv_blocks = 8;  // exactly one 128-token context
    o.max_batched_tokens = 16;
    Scheduler s(*model, be, o);
    auto rs = mixed_requests(6, 40);
    const std::vector<Outcome> got = run_all(s, rs);
    expect_all_alone(*model, be, rs, got, o.context);
    const serve::SchedulerStats st = s.stats();
    EXPECT_GT(st.preemptions, 0u);
    EXPECT_EQ(st.kv_blocks_used, 0);
}

// Two requests in a pool of five 16-token blocks, prompts prefilled 8 tokens a step: A (30 prompt tokens, 2 blocks)
// joins first; B (40 prompt tokens, 3 blocks), admitted while A prefills, is still prefilling when A's next block
// is due two steps later. The pool is empty then, so B, the newest running sequence, is preempted before its first
// token, and waits for A to finish (A grows to 4 blocks; B needs 3).
struct PreemptedBeforeFirstToken {
    SchedulerOptions options() const {
        SchedulerOptions o;
        o.max_seqs = 2;
        o.context = 80;  // the pool holds one context
        o.kv_blocks = 5;
        o.max_batched_tokens = 8;
        return o;
    }
    GenerationRequest a() const {
        GenerationRequest r;
        r.prompt = prompt_of(1, 30);
        r.max_new_tokens = 30;
        return r;
    }
    GenerationRequest b() const {
        GenerationRequest r;
        r.prompt = prompt_of(2, 40);
        r.max_new_tokens = 10;
        r.params = seeded(77);
        return r;
    }
};

// The preempted sequence's only owner is the scheduler (its client dropped the stream; a cancellation that arrives
// after the step's drop_cancelled leaves the same ownership): preempting it must not free it while it is requeued
// (issue 40: `preempt` took a reference into `running`, erased it there and read it again; AddressSanitizer saw the
// freed sequence read). It completes unread, and every block comes back.
TEST(Scheduler, PreemptingASequenceOnlyTheSchedulerHoldsRequeuesIt) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    const PreemptedBeforeFirstToken w;
    Scheduler s(*model, be, w.options());
    const std::shared_ptr<serve::Stream> a = s.submit(w.a());
    s.submit(w.b());  // dropped at once, never cancelled
    const Outcome got = drain(*a);
    ASSERT_TRUE(testing::wait_for_stats(s, [](const auto& st) { return st.requests_finished == 2; }));
    const serve::SchedulerStats st = s.stats();
    EXPECT_GE(st.preemptions, 1u);
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(st.waiting, 0);
    EXPECT_EQ(st.kv_blocks_used, 0);
    EXPECT_EQ(got.finish, Finish::Length);
    EXPECT_EQ(got.tokens, alone(*model, be, w.a(), w.options().context));
}

// A prompt recomputed after a preemption before its first token counts once in prompt_tokens (the metric
// tracelm:prompt_tokens_total); both requests still give what they give alone.
TEST(Scheduler, APromptPreemptedBeforeItsFirstTokenCountsOnce) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    const PreemptedBeforeFirstToken w;
    Scheduler s(*model, be, w.options());
    const std::vector<Outcome> got = run_all(s, {w.a(), w.b()});
    ASSERT_TRUE(testing::wait_for_stats(s, [](const auto& st) { return st.requests_finished == 2; }));
    const serve::SchedulerStats st = s.stats();
    EXPECT_GE(st.preemptions, 1u);
    EXPECT_EQ(st.prompt_tokens, w.a().prompt.size() + w.b().prompt.size());
    EXPECT_EQ(st.kv_blocks_used, 0);
    expect_all_alone(*model, be, {w.a(), w.b()}, got, w.options().context);
}

// The real model (Q4_1 weights, f16 KV: the configuration where attention over one row sums in another order than
// over several): 16 concurrent requests of mixed lengths, greedy and seeded, on 16 rows whose KV pool holds two
// contexts, so joins, leaves and preemptions all happen; each answer equals the request run alone.
TEST(Scheduler, RealModelSixteenConcurrentWithPreemptionEachCompleteAsAlone) {
    TRACELM_NEED_SMOLLM2();
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::smollm2_gguf_path(), be);
    SchedulerOptions o;
    o.max_seqs = 16;
    o.context = 160;
    o.kv_blocks = 20;
    o.max_batched_tokens = 32;
    Scheduler s(*model, be, o);
    auto rs = mixed_requests(16, 28);
    for (auto& r : rs) r.prompt.resize(std::min<size_t>(r.prompt.size(), 70));
    const std::vector<Outcome> got = run_all(s, rs);
    expect_all_alone(*model, be, rs, got, o.context);
    EXPECT_GT(s.stats().preemptions, 0u);
    EXPECT_EQ(s.stats().kv_blocks_used, 0);
}

TEST(Scheduler, StopIdsEndWithStopAndContextEndsWithLength) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    SchedulerOptions o;
    o.max_seqs = 2;
    o.context = 64;
    Scheduler s(*model, be, o);
    GenerationRequest r;
    r.prompt = prompt_of(3, 10);
    r.max_new_tokens = 1000;  // more than the context holds: ends when prompt + generated fill it
    const Outcome full = drain(*s.submit(r));
    EXPECT_EQ(full.finish, Finish::Length);
    EXPECT_EQ(static_cast<int64_t>(full.tokens.size()), o.context - 10);
    // The fifth token as a stop id: four tokens come back, the stop id itself does not.
    r.max_new_tokens = 20;
    r.stop_ids = {full.tokens[4]};
    const auto first = std::find(full.tokens.begin(), full.tokens.end(), full.tokens[4]);
    const Outcome stopped = drain(*s.submit(r));
    EXPECT_EQ(stopped.finish, Finish::Stop);
    EXPECT_EQ(stopped.tokens, std::vector<int32_t>(full.tokens.begin(), first));
}

// Stream::on_update: a consumer that never blocks in next() (the HTTP server's io threads) is told, from the scheduler
// thread, whenever tokens or the end are ready, and so reads every token with next(0); an empty callback ends the
// calls.
TEST(Scheduler, OnUpdateTellsWhenTokensAreReady) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    SchedulerOptions o;
    o.max_seqs = 2;
    o.context = 64;
    Scheduler s(*model, be, o);
    GenerationRequest r;
    r.prompt = prompt_of(5, 8);
    r.max_new_tokens = 12;
    const std::shared_ptr<serve::Stream> stream = s.submit(r);
    std::mutex mu;
    std::condition_variable cv;
    int calls = 0;
    stream->on_update([&] {
        {
            std::lock_guard<std::mutex> lock(mu);
            ++calls;
        }
        cv.notify_one();
    });
    Outcome got;
    int seen = 0;
    while (got.finish == Finish::None) {
        {
            std::unique_lock<std::mutex> lock(mu);
            ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return calls > seen; })) << "no call";
            seen = calls;
        }
        const serve::StreamUpdate u = stream->next(std::chrono::milliseconds(0));
        got.tokens.insert(got.tokens.end(), u.tokens.begin(), u.tokens.end());
        got.finish = u.finish;
    }
    EXPECT_EQ(got.finish, Finish::Length);
    EXPECT_EQ(got.tokens, alone(*model, be, r, o.context));
    stream->on_update({});
    // A second request's updates reach nobody once its callback is cleared.
    const std::shared_ptr<serve::Stream> other = s.submit(r);
    other->on_update([&] { ++calls; });  // any call before the clear is counted in `before`
    other->on_update({});
    const int before = calls;
    EXPECT_EQ(drain(*other).tokens, got.tokens);
    EXPECT_EQ(calls, before);
}

// Requests that can never run are refused naming the lengths, alone or in a group (which is then queued not at all).
TEST(Scheduler, RequestsThatCanNeverRunAreRefusedNamingTheLengths) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    SchedulerOptions o;
    o.context = 32;
    Scheduler s(*model, be, o);
    GenerationRequest r;
    r.prompt = prompt_of(1, 32);
    try {
        s.submit(r);
        FAIL() << "a 32-token prompt fits no new token in a 32-token context";
    } catch (const serve::RequestError& e) {
        EXPECT_NE(std::string(e.what()).find("prompt of 32 tokens"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("context of 32"), std::string::npos) << e.what();
    }
    r.prompt = {};
    EXPECT_THROW(s.submit(r), serve::RequestError);
    r.prompt = {1, -5};
    EXPECT_THROW(s.submit(r), serve::RequestError);
    r.prompt = {1, 2};
    r.max_new_tokens = 0;
    EXPECT_THROW(s.submit(r), serve::RequestError);
    // A group is queued all or none: one request that can never run refuses the group.
    GenerationRequest good;
    good.prompt = prompt_of(1, 8);
    good.max_new_tokens = 4;
    EXPECT_THROW(s.submit(std::vector<GenerationRequest>{good, r}), serve::RequestError);
    EXPECT_EQ(s.stats().waiting, 0);
    EXPECT_EQ(drain(*s.submit(good)).finish, Finish::Length);
}

// A cancelled stream's sequence leaves within a step and its blocks return; the others go on unchanged.
TEST(Scheduler, CancelledRequestsFreeTheirBlocks) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    SchedulerOptions o;
    o.max_seqs = 4;
    o.context = 512;
    Scheduler s(*model, be, o);
    GenerationRequest endless;
    endless.prompt = prompt_of(5, 20);
    endless.max_new_tokens = 400;
    auto a = s.submit(endless);
    auto rs = mixed_requests(2, 12);
    auto b = s.submit(rs[0]);
    auto c = s.submit(rs[1]);
    while (a->next(std::chrono::milliseconds(200)).tokens.empty()) {
    }
    a->cancel();
    EXPECT_EQ(drain(*a).finish, Finish::Cancelled);
    const std::vector<Outcome> got = {drain(*b), drain(*c)};
    expect_all_alone(*model, be, rs, got, o.context);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (s.stats().running > 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(s.stats().running, 0);
    EXPECT_EQ(s.stats().kv_blocks_used, 0);
}

// ---- the engine's row API, step by step ----

// Steady steps are replays with no host write. Between steps the host writes only what changed: one block-table
// range per row that reaches a new KV block, and a leaving row's own state.
TEST(ContinuousBatching, SteadyStepsWriteNothingAndChangesWriteOnlyTheirRow) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    EngineOptions opt;
    opt.max_seqs = 4;
    opt.context = 128;
    Engine e(*model, be, opt);
    int32_t first = 0;
    for (int i = 0; i < 3; ++i) {
        const int row = e.admit(prompt_of(i, 5 + 4 * i), {}, sampling::RowParams{}, 0);
        ASSERT_EQ(row, i);
        while (!e.prefill(row, &first)) {
        }
    }
    int grown_steps = 0, steady = 0;
    for (int i = 0; i < 40; ++i) {
        SCOPED_TRACE(::testing::Message() << "step " << i);
        int crossing = 0;  // rows whose next step advances into a block they do not hold yet
        for (int r = 0; r < 3; ++r) crossing += (testing::EngineProbe(e).position(r) + 1) % opt.block_size == 0 ? 1 : 0;
        const uint64_t w0 = e.row_writes(), u0 = be.uploads();
        ASSERT_TRUE(e.grow().empty());
        EXPECT_EQ(e.row_writes() - w0, static_cast<uint64_t>(crossing));
        EXPECT_EQ(be.uploads() - u0, static_cast<uint64_t>(crossing));
        grown_steps += crossing > 0 ? 1 : 0;
        const uint64_t u1 = be.uploads(), eager = be.eager_ops(), s0 = e.steady_steps();
        e.step();
        EXPECT_EQ(be.uploads(), u1);
        if (i >= 2) {
            EXPECT_EQ(be.eager_ops(), eager) << "not a replay";
        }
        // The first step follows the joins; later ones are steady unless a block was added before them.
        const bool want_steady = i > 0 && crossing == 0;
        EXPECT_EQ(e.steady_steps() - s0, want_steady ? 1u : 0u);
        steady += want_steady ? 1 : 0;
    }
    EXPECT_GT(grown_steps, 3);
    EXPECT_GT(steady, 30);
    // A leave rewrites one row, before the next step (release() itself changes host state only): its block table,
    // its sampling parameters and its four decode-state entries.
    const uint64_t before = be.uploads(), rows = e.row_writes();
    e.release(1);
    EXPECT_EQ(be.uploads(), before);
    EXPECT_EQ(testing::EngineProbe(e).free_rows(), 2);
    ASSERT_TRUE(e.grow().empty());
    const uint64_t grown = be.uploads() - before;
    e.step();
    EXPECT_EQ(e.row_writes(), rows + 1 + grown);
    EXPECT_EQ(be.uploads(), before + grown + 6);
}

}  // namespace
}  // namespace tracelm
