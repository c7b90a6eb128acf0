// dsa_topk on the CPU: the semantics on hand-made cases, argument errors, the seeded fuzz subset against the
// rank-count oracle, real sizes, and the op recorded into a captured graph.
//
// Mutation check, done once by hand on the Release build and reverted (tests run: DsaTopk*, DsaAttention*,
// SparseAttention*):
//  - tie-break reversed in the fast kernel (portable and AVX2 emit took the *last* ties): failed
//    EveryImplementationGivesTheHandMadeAnswers (backend op and both kernels, on "the lower index wins a tie", "NaNs
//    among themselves by index", "-0.0 equals +0.0", "all equal"), SeededFuzzSubsetMatchesOracle (shape 5:
//    "row 1 position 22: got 36, want 34"), RealSizesMatchOracle, ReplayedGraphEqualsEagerWithoutAllocating,
//    DsaTopkCli.PrintsIndicesFromEveryCpuImplementation.
//  - tie-break reversed in the reference (a > b on equal scores): the same five tests.
//  - window start clamp removed (clamp_window's s0 = start): failed EveryImplementationGivesTheHandMadeAnswers,
//    SeededFuzzSubsetMatchesOracle (shape 1: "got -3, want -1"), DsaTopkCli.PrintsIndicesFromEveryCpuImplementation.
//  - window end clamp removed (s1 = end): EveryImplementationGivesTheHandMadeAnswers aborted (reads and writes past the
//    row), SeededFuzzSubsetMatchesOracle failed (the reference tried to allocate an INT64_MAX window),
//    DsaTopkCli.PrintsIndicesFromEveryCpuImplementation failed ([29,32,44] for a 7-key row).
//  - threshold comparison off by one (emit counted keys >= threshold as above it, portable and AVX2): failed
//    EveryImplementationGivesTheHandMadeAnswers, SeededFuzzSubsetMatchesOracle (shape 5), RealSizesMatchOracle,
//    ReplayedGraphEqualsEagerWithoutAllocating; take_equal one too many: the same four.
//    The radix walk's `hist[digit] < need` made `<=` passed everything: it is an equivalent mutant (when a
//    bin completes the selection exactly it settles on the next lower present key with no ties to take,
//    which selects the same keys).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "support/dsa_topk_fuzz.h"
#include "ops/dsa/dsa_topk.h"
#include "support/test_support.h"

namespace tracelm::dsa {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();

using fuzz::one_row;

TEST(DsaTopk, EveryImplementationGivesTheHandMadeAnswers) {
    struct Expect {
        const char* what;
        TopkCase c;
        std::vector<int64_t> indices;
    };
    const std::vector<float> desc = {5, 4, 3, 2, 1};
    const std::vector<Expect> cases = {
        {"the lower index wins a tie", one_row({1, 3, 3, 2, 3}, 0, 5, 2), {1, 2}},
        {"ties, then the next score", one_row({1, 3, 3, 2, 3}, 0, 5, 4), {1, 2, 3, 4}},
        {"key order, not score order", one_row({1, 9, 5, 7}, 0, 4, 3), {1, 2, 3}},
        {"NaN ranks below -inf", one_row({kNan, -kInf, kNan, 0}, 0, 4, 2), {1, 3}},
        {"NaNs among themselves by index", one_row({kNan, -kInf, kNan, 0}, 0, 4, 3), {0, 1, 3}},
        {"+inf first", one_row({kNan, 3.0f, kInf, -kInf}, 0, 4, 1), {2}},
        {"-0.0 equals +0.0", one_row({-0.0f, 0.0f, -0.0f}, 0, 3, 2), {0, 1}},
        {"+0.0 does not beat an earlier -0.0", one_row({-0.0f, 0.0f}, 0, 2, 1), {0}},
        {"window inside", one_row(desc, 1, 4, 2), {1, 2}},
        {"window start below 0", one_row(desc, -3, 2, 5), {0, 1, -1, -1, -1}},
        {"window end past nk", one_row(desc, 3, 100, 1), {3}},
        {"empty window", one_row(desc, 4, 2, 2), {-1, -1}},
        {"window outside the keys", one_row(desc, 7, 9, 1), {-1}},
        {"int64 extremes", one_row(desc, kMin, kMax, 7), {0, 1, 2, 3, 4, -1, -1}},
        {"reversed int64 extremes", one_row(desc, kMax, kMin, 1), {-1}},
        {"n == topk: window in key order", one_row({1, 9, 5}, 0, 3, 3), {0, 1, 2}},
        {"n < topk: padding", one_row({1, 9, 5}, 0, 3, 4), {0, 1, 2, -1}},
        {"no keys", one_row({}, 0, 10, 2), {-1, -1}},
        {"all equal", one_row(std::vector<float>(40, 2.5f), 0, 40, 3), {0, 1, 2}},
    };
    fuzz::Checker checker(2);
    for (const Expect& e : cases) {
        EXPECT_EQ(fuzz::rank_count_oracle(e.c), e.indices) << "oracle: " << e.what;
        for (const auto& [impl, got] : checker.run_all(e.c)) EXPECT_EQ(got, e.indices) << impl << ": " << e.what;
    }
    TopkCase none;
    none.topk = 3;
    for (const auto& [impl, got] : checker.run_all(none)) EXPECT_TRUE(got.empty()) << impl << ": no rows";
}

TEST(DsaTopk, SeededFuzzSubsetMatchesOracle) {
#if defined(__SANITIZE_ADDRESS__)
    // Instrumented builds run the same seed on fewer shapes; the Release build runs all 20,000.
    constexpr int kShapes = 4000;
#else
    constexpr int kShapes = 20000;
#endif
    fuzz::Checker checker(2);
    std::mt19937_64 rng(20240917);
    for (int i = 0; i < kShapes; ++i) {
        const TopkCase c = fuzz::random_case(rng);
        const std::string diff = checker.check(c);
        ASSERT_TRUE(diff.empty()) << "shape " << i << ": " << diff;
    }
}

TEST(DsaTopk, RealSizesMatchOracle) {
    // nk = 131072 with the topk values in use, on a spread row, a tie-heavy one and one with specials.
    std::mt19937_64 rng(5);
    TopkCase c;
    c.rows = 3;
    c.keys = 131072;
    c.scores.resize(static_cast<size_t>(c.rows * c.keys));
    fuzz::fill_row(c.scores.data(), c.keys, fuzz::Fill::Normal, rng);
    fuzz::fill_row(c.scores.data() + c.keys, c.keys, fuzz::Fill::Quantized, rng);
    fuzz::fill_row(c.scores.data() + 2 * c.keys, c.keys, fuzz::Fill::Sprinkled, rng);
    c.window_start = {0, 100, 0};
    c.window_end = {c.keys, c.keys, 70000};
    fuzz::Checker checker(2);
    for (const int64_t topk : {512, 1024, 2048}) {
        c.topk = topk;
        EXPECT_EQ(checker.check(c), "") << "topk " << topk;
    }
}

// Device tensors for direct backend calls.
class DsaTopkOp : public ::testing::Test {
   protected:
    cpu::CpuBackend be{2};

    template <typename T>
    Tensor make(const std::string& name, DType dt, int64_t rows, int64_t cols, const std::vector<T>& data) {
        Tensor t = whole(be.alloc(static_cast<size_t>(rows * cols) * sizeof(T), name), dt, rows, cols);
        if (!data.empty()) be.upload(t, data.data());
        return t;
    }
    std::vector<int64_t> get(const Tensor& t) {
        std::vector<int64_t> v(static_cast<size_t>(t.numel()));
        be.download(t, v.data());
        return v;
    }
};

TEST_F(DsaTopkOp, InvalidArgumentsThrowAndWriteNothing) {
    const int64_t T = 2, nk = 6, topk = 3;
    const Tensor scores = make("scores", DType::F32, T, nk, std::vector<float>(T * nk, 1.0f));
    const Tensor start = make("start", DType::I64, T, 1, std::vector<int64_t>{0, 0});
    const Tensor end = make("end", DType::I64, T, 1, std::vector<int64_t>{nk, nk});
    const std::vector<int64_t> sentinel(T * topk, 77);
    const Tensor indices = make("indices", DType::I64, T, topk, sentinel);
    const DsaTopkWorkspace ws = make_topk_workspace(be, T, nk);

    Tensor no_topk = indices, negative_topk = indices, negative_keys = scores, bad_dtype = scores;
    no_topk.cols = 0;
    negative_topk.cols = -3;
    negative_keys.cols = -1;
    bad_dtype.dtype = DType::I32;
    const Tensor short_start = start.slice_rows(0, 1);
    const Tensor extra_rows = indices.view(1, T * topk);
    struct Bad {
        const char* what;
        Tensor s, b, e, i;
        const char* message;
    };
    for (const Bad& bad : {Bad{"topk 0", scores, start, end, no_topk, "topk must be positive"},
                           Bad{"topk < 0", scores, start, end, negative_topk, "topk must be positive"},
                           Bad{"nk < 0", negative_keys, start, end, indices, "must not be negative"},
                           Bad{"one window start for two rows", scores, short_start, end, indices, "one entry per row"},
                           Bad{"indices rows", scores, start, end, extra_rows, "rows"},
                           Bad{"scores dtype", bad_dtype, start, end, indices, "expected f32"}}) {
        try {
            be.dsa_topk(bad.s, bad.b, bad.e, ws, bad.i);
            ADD_FAILURE() << bad.what << ": no error";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(bad.message), std::string::npos) << bad.what << ": " << e.what();
        }
        EXPECT_EQ(get(indices), sentinel) << bad.what << ": output written";
    }

    // The host-side implementations reject the same cases before writing anything.
    TopkCase c = one_row({1, 2, 3}, 0, 3, 0);
    for (const int64_t bad_topk : {int64_t{0}, int64_t{-1}}) {
        c.topk = bad_topk;
        EXPECT_THROW(topk_reference(c), std::invalid_argument);
        TopkRunner runner(be, 1, 3, 3);
        EXPECT_THROW(runner.run(c), std::invalid_argument);
    }
    c.topk = 1;
    c.window_end = {};
    EXPECT_THROW(topk_reference(c), std::invalid_argument);
    c.window_end = {3};
    c.keys = -3;
    EXPECT_THROW(topk_reference(c), std::invalid_argument);
    c.keys = 4;  // three scores for one row of four keys
    EXPECT_THROW(topk_reference(c), std::invalid_argument);
}

TEST_F(DsaTopkOp, WorkspaceMustFitAndIsMadeOutsideCapture) {
    const Tensor scores = make("scores", DType::F32, 2, 100, std::vector<float>(200, 0.5f));
    const Tensor start = make("start", DType::I64, 2, 1, std::vector<int64_t>{0, 0});
    const Tensor end = make("end", DType::I64, 2, 1, std::vector<int64_t>{100, 100});
    const Tensor indices = make("indices", DType::I64, 2, 10, std::vector<int64_t>{});
    EXPECT_THROW(be.dsa_topk(scores, start, end, DsaTopkWorkspace{}, indices), std::invalid_argument);
    EXPECT_THROW(be.dsa_topk(scores, start, end, make_topk_workspace(be, 2, 99), indices), std::invalid_argument);
    EXPECT_THROW(be.dsa_topk(scores, start, end, make_topk_workspace(be, 1, 100), indices), std::invalid_argument);
    // A workspace sized for a backend with fewer threads is too small for this one.
    cpu::CpuBackend one_thread(1);
    DsaTopkWorkspace small = make_topk_workspace(one_thread, 2, 100);
    EXPECT_THROW(be.dsa_topk(scores, start, end, small, indices), std::invalid_argument);

    be.begin_capture();
    EXPECT_THROW(make_topk_workspace(be, 2, 100), CaptureViolation);
    be.end_capture();
}

TEST_F(DsaTopkOp, ReplayedGraphEqualsEagerWithoutAllocating) {
    const int64_t T = 4, nk = 50000, topk = 2048;
    std::mt19937_64 rng(11);
    std::vector<float> first(T * nk), second(T * nk);
    for (int64_t r = 0; r < T; ++r) {
        fuzz::fill_row(first.data() + r * nk, nk, r % 2 == 0 ? fuzz::Fill::Normal : fuzz::Fill::Quantized, rng);
        fuzz::fill_row(second.data() + r * nk, nk, r % 2 == 0 ? fuzz::Fill::Sprinkled : fuzz::Fill::Narrow, rng);
    }
    const std::vector<int64_t> starts = {0, 0, 1000, -5}, ends = {nk, 30000, nk, 4000};
    const Tensor scores = make("scores", DType::F32, T, nk, first);
    const Tensor start = make("start", DType::I64, T, 1, starts);
    const Tensor end = make("end", DType::I64, T, 1, ends);
    const Tensor indices = make("indices", DType::I64, T, topk, std::vector<int64_t>{});
    const DsaTopkWorkspace ws = make_topk_workspace(be, T, nk);

    // Eager: no allocation per call either (the workspace was prepared above).
    uint64_t before = testing::heap_allocations().load();
    be.dsa_topk(scores, start, end, ws, indices);
    EXPECT_EQ(testing::heap_allocations().load() - before, 0u);
    const std::vector<int64_t> eager_first = get(indices);

    be.begin_capture();
    be.dsa_topk(scores, start, end, ws, indices);
    const GraphId g = be.end_capture();
    EXPECT_EQ(be.graph_nodes(g), 1u);

    // The graph reads the buffers as they are at replay: new scores, new selection.
    be.upload(scores, second.data());
    before = testing::heap_allocations().load();
    be.replay(g);
    EXPECT_EQ(testing::heap_allocations().load() - before, 0u);
    const std::vector<int64_t> replayed_second = get(indices);
    be.dsa_topk(scores, start, end, ws, indices);
    EXPECT_EQ(replayed_second, get(indices));

    be.upload(scores, first.data());
    be.replay(g);
    EXPECT_EQ(get(indices), eager_first);

    TopkCase c;
    c.rows = T;
    c.keys = nk;
    c.topk = topk;
    c.scores = second;
    c.window_start = starts;
    c.window_end = ends;
    EXPECT_EQ(replayed_second, topk_reference(c));
}

}  // namespace
}  // namespace tracelm::dsa
