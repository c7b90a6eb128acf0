// Replayed decode must reproduce eager decode bit for bit, and replay must not allocate.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <cstdlib>
#include <new>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "support/test_support.h"

// Counts every heap allocation in the test process (read through testing::heap_allocations()).
void* operator new(std::size_t n) {
    tracelm::testing::heap_allocations().fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
// GCC cannot tell that the replaced operator new above is where these pointers came from.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace tracelm {
namespace {

struct Case {
    std::vector<std::vector<int32_t>> prompts;
    int steps;
};

// Drives two engines over the same batch, one eager and one replaying, and compares every step's
// logits and sampled ids exactly.
void expect_replay_equals_eager(const Case& c, const std::string& model_dir, DType kv_dtype = DType::F32) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(model_dir, be);
    EngineOptions opt;
    opt.kv_dtype = kv_dtype;
    opt.block_size = 16;
    opt.max_seqs = static_cast<int>(c.prompts.size());
    opt.context = 512;
    opt.prefill_chunk = 32;
    opt.capture = false;
    Engine eager(*model, be, opt);
    opt.capture = true;
    Engine replay(*model, be, opt);

    ASSERT_EQ(eager.start(c.prompts, c.steps + 1), replay.start(c.prompts, c.steps + 1));
    std::set<int32_t> distinct;
    for (int i = 0; i < c.steps; ++i) {
        eager.step();
        replay.step();
        const auto le = eager.logits(), lr = replay.logits();
        ASSERT_EQ(le.size(), lr.size());
        ASSERT_EQ(0, std::memcmp(le.data(), lr.data(), le.size() * sizeof(float))) << "logits differ at step " << i;
        const auto se = eager.sampled(), sr = replay.sampled();
        ASSERT_EQ(se, sr) << "tokens differ at step " << i;
        distinct.insert(se.begin(), se.end());
    }
    EXPECT_TRUE(replay.captured());
    EXPECT_EQ(replay.replays(), c.steps - 1);  // one eager warm step, then replays
    EXPECT_EQ(eager.history(c.steps), replay.history(c.steps));
    // A random model falls into short loops, but not into a single repeated token.
    EXPECT_GE(distinct.size(), 2u);
}

TEST(Replay, EqualsEagerOneSequence300StepsF32) {
    expect_replay_equals_eager({{{785, 6722, 315, 9625, 374}}, 300}, testing::generated_checkpoint("tiny", 7, DType::F32));
}

TEST(Replay, EqualsEagerThreeSequencesBf16) {
    // Different prompt lengths put each sequence at a different offset within its blocks; 300 steps
    // cross many 16-token block boundaries. The 40-token prompt spans two prefill chunks.
    std::vector<int32_t> long_prompt;
    for (int i = 0; i < 40; ++i) long_prompt.push_back(1000 + 37 * i);
    expect_replay_equals_eager({{{9707, 11, 1879, 0}, long_prompt, {151644, 872, 198}}, 300},
                               testing::generated_checkpoint("tiny", 7, DType::BF16));
}

// An f16 cache (llama.cpp's attention numbers, whose dot orders depend on how many query rows a sequence has in
// the call), on the llama architecture, whose q.k sums in llama.cpp's interleaved element order.
TEST(Replay, EqualsEagerThreeSequencesF16Kv) {
    std::vector<int32_t> long_prompt;
    for (int i = 0; i < 40; ++i) long_prompt.push_back(100 + 7 * i);
    expect_replay_equals_eager({{{3, 1, 4, 1, 5}, long_prompt, {9}}, 200}, testing::repo_path("testdata/models/tiny-llama"),
                               DType::F16);
}

TEST(Replay, ReplayPerformsNoHeapAllocation) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    for (const DType kv : {DType::F32, DType::F16}) {
        EngineOptions opt;
        opt.context = 256;
        opt.kv_dtype = kv;
        Engine engine(*model, be, opt);
        engine.start({{1, 2, 3}}, 200);
        engine.step();  // eager warm-up
        engine.step();  // capture + first replay
        ASSERT_TRUE(engine.captured());
        const uint64_t before = testing::heap_allocations().load();
        for (int i = 0; i < 100; ++i) engine.step();
        EXPECT_EQ(testing::heap_allocations().load() - before, 0u) << dtype_name(kv);
        EXPECT_EQ(engine.replays(), 101);
    }
}

TEST(Replay, GraphIsReusedAcrossRequestsOfTheSameBatchSize) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    EngineOptions opt;
    opt.context = 256;
    opt.capture = false;
    Engine eager(*model, be, opt);
    opt.capture = true;
    Engine replay(*model, be, opt);
    for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{5, 6, 7}, std::vector<int32_t>{100, 200, 300, 400, 500}}) {
        ASSERT_EQ(eager.start({prompt}, 40), replay.start({prompt}, 40));
        for (int i = 0; i < 39; ++i) {
            eager.step();
            replay.step();
        }
        EXPECT_EQ(eager.history(39), replay.history(39));
    }
    EXPECT_EQ(replay.replays(), 38 + 39);  // the second request replays from its first step
}

}  // namespace
}  // namespace tracelm
