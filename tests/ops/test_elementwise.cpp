// The elementwise family (copy, embedding, add, glu, gather_last): every backend against the CPU backend
// (support/op_conformance.h), and the CPU backend against the references of src/ops/elementwise.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ops/elementwise/elementwise.h"
#include "support/op_conformance.h"
#include "support/reference_check.h"

namespace tracelm {
namespace {

using namespace conformance;

std::vector<OpCase> copy_cases(std::mt19937& rng) {
    return {{"copy", {f32("src", 5, 37, randn(rng, 5 * 37)), f32("dst", 5, 37, std::vector<float>(5 * 37))}, {1},
             0.0, [](Backend& be, const Bound& b) { be.copy(b.t[1], b.t[0]); }}};
}

std::vector<OpCase> embedding_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for (DType w : kWeightTypes) {
        // Ids outside [0, rows) give zero rows.
        out.push_back({"embedding " + dt(w),
                       {i32("ids", 1, 9, {3, 0, 49, -1, 50, 7, 7, 12, 1 << 30}),
                        weight("table", w, 50, 72, randn(rng, 50 * 72)), f32("out", 9, 72, std::vector<float>(9 * 72))},
                       {2},
                       0.0,
                       [](Backend& be, const Bound& b) { be.embedding(b.t[0], b.t[1], 25.298221f, b.t[2]); }});
    }
    return out;
}

// GGML block tables, on the backends that run them (dequantized in the CPU's float operations, exactly).
std::vector<OpCase> quant_embedding_cases(std::mt19937& rng, const BackendCapabilities& caps) {
    std::vector<OpCase> out;
    for (DType w : kBlockTypes) {
        if (!caps.has_weight_type(w)) continue;
        const int64_t rows = 50, cols = 3 * dtype_block_elems(w);
        out.push_back({"embedding " + dt(w),
                       {i32("ids", 1, 6, {3, 0, 49, -1, 50, 7}),
                        block_weight("table", w, rows, cols, randn(rng, static_cast<size_t>(rows * cols)), rng),
                        f32("out", 6, cols, std::vector<float>(6 * cols))},
                       {2},
                       0.0,
                       [](Backend& be, const Bound& b) { be.embedding(b.t[0], b.t[1], 25.298221f, b.t[2]); }});
    }
    return out;
}

std::vector<OpCase> elementwise_cases(std::mt19937& rng) {
    const int64_t n = 3 * 1000;
    std::vector<OpCase> out = {
        {"add",
         {f32("a", 3, 1000, randn(rng, n)), f32("b", 3, 1000, randn(rng, n)), f32("out", 3, 1000, std::vector<float>(n))},
         {2},
         0.0,
         [](Backend& be, const Bound& b) { be.add(b.t[0], b.t[1], b.t[2]); }}};
    for (const Activation act : {Activation::Silu, Activation::GeluTanh, Activation::GeluTanhF16}) {
        // The f16 table's result is rounded to f16: another tanhf may land on the neighbouring f16 value.
        out.push_back({std::string("glu ") + activation_name(act),
                       {f32("gate", 3, 1000, randn(rng, n, 4.0f)), f32("up", 3, 1000, randn(rng, n)),
                        f32("out", 3, 1000, std::vector<float>(n))},
                       {2},
                       act == Activation::GeluTanhF16 ? 1e-3 : kElementwise,
                       [act](Backend& be, const Bound& b) { be.glu(b.t[0], b.t[1], act, b.t[2]); }});
    }
    return out;
}

std::vector<OpCase> gather_last_cases(std::mt19937& rng) {
    // Sequences of 0 (first: no last row), 3, 0 and 7 tokens.
    return {{"gather_last",
             {f32("x", 10, 33, randn(rng, 330)), i32("qsl", 1, 5, {0, 0, 3, 3, 10}),
              f32("out", 4, 33, std::vector<float>(132))},
             {2},
             0.0,
             [](Backend& be, const Bound& b) { be.gather_last(b.t[0], b.t[1], b.t[2]); }}};
}

TEST_P(OpConformance, CopyMatchesTheCpuReference) { check(copy_cases(rng_)); }
TEST_P(OpConformance, EmbeddingMatchesTheCpuReference) { check(embedding_cases(rng_)); }
TEST_P(OpConformance, QuantizedEmbeddingMatchesTheCpuReference) {
    const std::vector<OpCase> cases = quant_embedding_cases(rng_, be_->capabilities());
    if (cases.empty()) GTEST_SKIP() << GetParam() << " runs no GGML block tables";
    check(cases);
}
TEST_P(OpConformance, AddAndGluMatchTheCpuReference) { check(elementwise_cases(rng_)); }
TEST_P(OpConformance, GatherLastMatchesTheCpuReference) { check(gather_last_cases(rng_)); }


// ---- the CPU backend against the references of src/ops/elementwise ----

using ElementwiseReference = testing::OpReferenceTest;

TEST_F(ElementwiseReference, EmbeddingCopiesTableRowsAndZeroesIdsOutsideTheTable) {
    const auto table = randn(50 * 72);
    const std::vector<int32_t> ids = {3, 0, 49, -1, 50, 7, 7, 1 << 30};
    const std::vector<float> want = reference::embedding(ids, table, 72);
    for (const DType dt : {DType::F32, DType::BF16}) {
        const Tensor out = f32("out", 8, 72, std::vector<float>(8 * 72, 5.0f));
        const Tensor t = dt == DType::F32 ? f32("table", 50, 72, table) : make("table", dt, 50, 72, to_bf16(table));
        be.embedding(i32("ids", 8, 1, ids), t, 1.0f, out);
        EXPECT_EQ(get<float>(out), dt == DType::F32 ? want : reference::embedding(ids, bf16_values(table), 72))
            << dtype_name(dt);
    }
}

TEST_F(ElementwiseReference, EmbeddingScalesItsRowsWithOneRounding) {
    const auto table = randn(50 * 72);
    const std::vector<int32_t> ids = {3, 0, 49, -1, 7};
    const float scale = 25.298221f;  // sqrt(640): Gemma's embedding scale
    const Tensor out = f32("out", 5, 72, std::vector<float>(5 * 72, 5.0f));
    be.embedding(i32("ids", 5, 1, ids), f32("table", 50, 72, table), scale, out);
    EXPECT_EQ(get<float>(out), reference::embedding(ids, table, 72, scale));
}

TEST_F(ElementwiseReference, AddAndGluMatchExactMath) {
    const size_t n = 3 * 1000;
    const auto a = randn(n), b = randn(n);
    std::vector<float> gate = randn(n);
    for (float& g : gate) g *= 8.0f;  // far into both tails of silu, and past GELU's +-10 cut-offs
    const Tensor sum = f32("sum", 3, 1000, std::vector<float>(n));
    be.add(f32("a", 3, 1000, a), f32("b", 3, 1000, b), sum);
    expect_close(get<float>(sum), reference::add(a, b), 1e-7, "add");
    for (const Activation act : {Activation::Silu, Activation::GeluTanh, Activation::GeluTanhF16}) {
        const Tensor out = f32("act", 3, 1000, std::vector<float>(n));
        be.glu(f32("gate", 3, 1000, gate), f32("up", 3, 1000, b), act, out);
        // The f16 table: both round gelu(f16(x)) to f16, from f32 and from double math; they may differ by one f16
        // step (2^-11 relative) where the value lies at a rounding boundary.
        expect_close(get<float>(out), reference::glu(gate, b, act), act == Activation::GeluTanhF16 ? 1e-3 : 1e-6,
                     activation_name(act));
    }
}

TEST_F(ElementwiseReference, GatherLastTakesEachSequencesLastRowAndZeroesEmptyOnes) {
    const auto x = randn(10 * 33);
    const std::vector<int32_t> qsl = {0, 0, 3, 3, 10};  // sequences of 0, 3, 0 and 7 rows
    const Tensor out = f32("out", 4, 33, std::vector<float>(4 * 33, 5.0f));
    be.gather_last(f32("x", 10, 33, x), i32("qsl", 1, 5, qsl), out);
    const std::vector<float> want = reference::gather_last(x, 33, qsl);
    EXPECT_EQ(get<float>(out), want);
    EXPECT_EQ(std::vector<float>(want.begin(), want.begin() + 33), std::vector<float>(33, 0.0f));
}

}  // namespace
}  // namespace tracelm
