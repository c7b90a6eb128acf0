// Replayed decode must reproduce eager decode bit for bit, and replay must not allocate.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <set>
#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "engine/engine.h"
#include "support/test_support.h"
#include "checkpoint/gguf_convert.h"

namespace tracelm {
namespace {

struct ReplayCase {
    std::vector<std::vector<int32_t>> prompts;
    int steps;
};

// Drives two engines over the same batch, one eager and one replaying, and compares every step's
// logits and sampled ids exactly.
void expect_replay_equals_eager(const ReplayCase& c, const std::string& model_dir, DType kv_dtype = DType::F32,
                                Numerics numerics = Numerics::Ggml) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(model_dir, be, {}, numerics);
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

// A mixture-of-experts model: each step's routing (router logits, top-k, grouping by expert) runs inside the graph,
// and three sequences choose overlapping and different experts.
TEST(Replay, EqualsEagerMixtureOfExperts) {
    expect_replay_equals_eager({{{785, 6722, 315, 9625, 374}, {1, 2, 3}, {42, 7, 7, 9, 11000}}, 60},
                               testing::generated_checkpoint("moe-tiny", 7, DType::F32));
}

// Captured mixture-of-experts steps, one sequence and a bucket of 16 (8 experts, 2 per token: the rows share some
// experts and not others), Q8_0 experts in both numerics: replays allocate nothing and the host writes nothing.
TEST(Replay, MixtureOfExpertsStepsAllocateAndUploadNothing) {
    testing::TempDir dir;
    const std::string path = testing::random_moe_gguf(dir, DType::Q8_0);
    for (const Numerics numerics : {Numerics::Ggml, Numerics::Fast}) {
        cpu::CpuBackend be(2);
        const auto model = Model::load(path, be, {}, numerics);
        for (const int seqs : {1, 16}) {
            EngineOptions opt;
            opt.context = 128;
            opt.max_seqs = seqs;
            Engine engine(*model, be, opt);
            std::vector<std::vector<int32_t>> prompts;
            for (int i = 0; i < seqs; ++i) prompts.push_back({1 + 97 * i, 5000 + 13 * i, 42});
            engine.start(prompts, 14);
            engine.step();  // eager warm-up
            engine.step();  // capture + first replay
            ASSERT_TRUE(engine.captured());
            const uint64_t allocations = testing::heap_allocations().load(), uploads = be.uploads();
            for (int i = 0; i < 8; ++i) engine.step();
            EXPECT_EQ(testing::heap_allocations().load() - allocations, 0u) << seqs << " sequences";
            EXPECT_EQ(be.uploads() - uploads, 0u) << seqs << " sequences";
            EXPECT_EQ(engine.replays(), 9);
            engine.finish();
        }
    }
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

// The fast numerics' repacked Q5_1 weights (formats/repack.h) on a random qwen3 GGUF, two sequences.
TEST(Replay, EqualsEagerFastNumerics) {
    testing::TempDir dir;
    const std::string path = dir.file("q5_1.gguf");
    make_random_gguf("qwen3", DType::Q5_1, 5, path);
    expect_replay_equals_eager({{{3, 1, 4, 1, 5}, {9, 2, 6}}, 60}, path, DType::F16, Numerics::Fast);
}

// Every weight type the engine runs: the float ones and every GGUF block type.
constexpr DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                                  DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// No allocation of any kind (heap, aligned, mmap; on any thread: test_allocation_counter.cpp) in 8 replayed steps
// of a random GGUF model of every weight type (and, for Q8_0 and Q4_1, their repacked fast-numerics forms), with an
// f32 and an f16 KV cache, on the Isa of this process. Two sequences, so that the matmuls take more than one token.
void expect_replays_allocate_nothing() {
    testing::TempDir dir;
    std::vector<std::pair<DType, Numerics>> runs;
    for (const DType wt : kWeightTypes) runs.emplace_back(wt, Numerics::Ggml);
    for (const DType wt : {DType::Q8_0, DType::Q4_1}) runs.emplace_back(wt, Numerics::Fast);
    for (const auto& [wt, numerics] : runs) {
        const std::string path = dir.file(std::string(dtype_name(wt)) + ".gguf");
        if (numerics == Numerics::Ggml) make_random_gguf("qwen3", wt, 3, path);
        cpu::CpuBackend be(2);
        const auto model = Model::load(path, be, {}, numerics);
        for (const DType kv : {DType::F32, DType::F16}) {
            EngineOptions opt;
            opt.context = 128;
            opt.max_seqs = 2;
            opt.kv_dtype = kv;
            Engine engine(*model, be, opt);
            engine.start({{1, 2, 3}, {7, 8, 9, 10, 11}}, 12);
            engine.step();  // eager warm-up
            engine.step();  // capture + first replay
            ASSERT_TRUE(engine.captured());
            const uint64_t before = testing::heap_allocations().load();
            for (int i = 0; i < 8; ++i) engine.step();
            EXPECT_EQ(testing::heap_allocations().load() - before, 0u)
                << dtype_name(model->weight_dtype()) << " weights, " << dtype_name(kv) << " cache, "
                << cpu::isa_name(cpu::active_isa());
            EXPECT_EQ(engine.replays(), 9);
        }
    }
}

// Once per Isa the CPU has: the Isa this process runs in place, each other one in a child process that
// TRACELM_ISA sets to it (the kernels are chosen once per process).
class ReplayAllocations : public ::testing::TestWithParam<cpu::Isa> {};

TEST_P(ReplayAllocations, NoneForAnyWeightType) {
    const cpu::Isa isa = GetParam();
    if (!cpu::can_run(isa))
        GTEST_SKIP() << "this CPU cannot run " << cpu::isa_name(isa);
    if (isa == cpu::active_isa()) {
        expect_replays_allocate_nothing();
        return;
    }
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() +
                             std::string(".") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    const testing::CliResult child = testing::run_command(std::string("TRACELM_ISA=") + cpu::isa_name(isa) + " '" +
                                                          self + "' --gtest_filter=" + name + " 2>&1");
    EXPECT_EQ(child.code, 0) << child.out;
    EXPECT_NE(child.out.find("[  PASSED  ] 1 test"), std::string::npos) << child.out;
}

INSTANTIATE_TEST_SUITE_P(Isas, ReplayAllocations,
                         ::testing::Values(cpu::Isa::Portable, cpu::Isa::Avx2, cpu::Isa::AvxVnni, cpu::Isa::Avx512),
                         [](const ::testing::TestParamInfo<cpu::Isa>& p) { return std::string(cpu::isa_name(p.param)); });

// A replayed step is one dispatch of the captured graph at the backend: the backend executes exactly the
// graph's ops through that one call and dispatches nothing eagerly. (An engine that silently fell back to
// eager ops would give the same bits; this is what tells them apart, whatever those ops allocate.)
TEST(Replay, ReplayedStepIsOneGraphDispatchWithNoEagerOps) {
    cpu::CpuBackend be(2);
    const auto model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
    EngineOptions opt;
    opt.context = 128;
    Engine engine(*model, be, opt);
    engine.start({{1, 2, 3}}, 20);
    // The warm-up step is eager: the counter of eager ops moves with the executed ones.
    uint64_t ops = be.ops_executed(), eager = be.eager_ops();
    engine.step();
    EXPECT_GT(be.eager_ops() - eager, 0u);
    EXPECT_EQ(be.eager_ops() - eager, be.ops_executed() - ops);
    for (int i = 0; i < 5; ++i) {
        ops = be.ops_executed();
        eager = be.eager_ops();
        engine.step();
        ASSERT_TRUE(engine.captured());
        EXPECT_GT(engine.graph_ops(), 0u);
        EXPECT_EQ(be.ops_executed() - ops, engine.graph_ops()) << "step " << i;
        EXPECT_EQ(be.eager_ops() - eager, 0u) << "step " << i;
    }
    EXPECT_EQ(engine.replays(), 5);
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
