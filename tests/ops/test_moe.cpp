// The mixture-of-experts ops (ops/moe/moe.h) on the CPU backend: moe_route against the reference row by row, bit for
// bit (ties, NaN, infinite rows); moe_route_grouped (DeepSeek's routing) against its reference row by row, on hand
// cases of tied groups and experts, against the float64 reference model's routes (testdata/ops), alone as in a batch
// bit for bit, and on every backend against the CPU (support/op_conformance.h); moe_ffn against a second
// implementation built from the backend's own verified ops, one (row, slot) at a time (matmul of the row by the
// expert's slice of the stacked weights, glu, the down matmul, the weighted sum in slot order on the host), bit for
// bit on float, GGML-quantized (Q8_0, Q4_0, Q4_K, Q6_K) and repacked weights, and against double-precision math on
// f32 weights; a row's bits alone equal its bits among others; a recorded graph routes from the logits uploaded
// before each replay, equals eager calls and allocates nothing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "formats/quantize.h"
#include "formats/repack.h"
#include "ops/ggml_math.h"
#include "ops/moe/moe.h"
#include "support/ggml_reference.h"
#include "support/op_conformance.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using conformance::OpConformance;

// A device tensor of the backend, freed with it.
struct Device {
    explicit Device(Backend& b) : be(b) {}
    ~Device() {
        for (Buffer* b : buffers) be.free(b);
    }
    Tensor make(const std::string& name, DType dt, int64_t rows, int64_t cols) {
        buffers.push_back(be.alloc(dtype_row_bytes(dt, cols) * static_cast<size_t>(rows), name));
        return whole(buffers.back(), dt, rows, cols);
    }
    Tensor f32(const std::string& name, int64_t rows, int64_t cols, const std::vector<float>& v) {
        Tensor t = make(name, DType::F32, rows, cols);
        be.upload(t, v.data());
        return t;
    }
    Tensor i32(const std::string& name, int64_t rows, int64_t cols, const std::vector<int32_t>& v) {
        Tensor t = make(name, DType::I32, rows, cols);
        be.upload(t, v.data());
        return t;
    }
    // f32 values stored as `dt` (quantized by formats/quantize.h; a repacked type: its GGML type's rows repacked).
    // The K types, which formats/quantize.h does not write, take gguf-made blocks of testdata/quant/<type>.bin
    // (the quantization fixtures) in a random order instead of v.
    Tensor weight(const std::string& name, DType dt, int64_t rows, int64_t cols, const std::vector<float>& v) {
        const DType plain = dtype_unpacked(dt);
        const size_t row_bytes = dtype_row_bytes(plain, cols);
        std::vector<char> bytes(row_bytes * static_cast<size_t>(rows));
        if (can_quantize_to(plain)) {
            for (int64_t r = 0; r < rows; ++r)
                quantize_row(plain, v.data() + r * cols, cols, bytes.data() + static_cast<size_t>(r) * row_bytes);
        } else {
            // Fixture: "TLQF", u32 version, type, rows, cols, then the blocks.
            const std::string fixture = testing::read_text("testdata/quant/" + std::string(dtype_name(plain)) + ".bin");
            EXPECT_GT(fixture.size(), 20u) << "no fixture for " << dtype_name(plain);
            const size_t block = dtype_row_bytes(plain, 256), blocks = (fixture.size() - 20) / block;
            std::mt19937 pick(static_cast<uint32_t>(rows * 31 + cols));
            for (size_t at = 0; at < bytes.size(); at += block)
                std::memcpy(bytes.data() + at, fixture.data() + 20 + (pick() % blocks) * block, block);
        }
        if (dt != plain) {
            std::vector<char> packed(bytes.size());
            repack_r16(plain, bytes.data(), packed.data(), rows, cols);
            bytes.swap(packed);
        }
        Tensor t = make(name, dt, rows, cols);
        be.upload(t, bytes.data());
        return t;
    }
    std::vector<float> read(const Tensor& t) {
        std::vector<float> v(static_cast<size_t>(t.numel()));
        be.download(t, v.data());
        return v;
    }
    Backend& be;
    std::vector<Buffer*> buffers;
};

std::vector<float> randn(std::mt19937& rng, size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

using testing::same_bits;

// The router product is ggml's f32 MUL_MAT (ggml_reference.h's transcriptions of vec_dot_f32 and tinyBLAS, checked
// there against llama.cpp): vec_dot's order for one row, tinyBLAS's from two rows when H % 8 == 0.
TEST(MoeRoute, RouterLogitsAreGgmlsF32Products) {
    cpu::CpuBackend be(2);
    Device d(be);
    std::mt19937 rng(5);
    const int64_t T = 5, E = 12;
    for (const int64_t H : {64, 40, 36}) {
        const std::vector<float> xv = randn(rng, static_cast<size_t>(T * H)), rv = randn(rng, static_cast<size_t>(E * H));
        const Tensor x = d.f32("x", T, H, xv), router = d.f32("router", E, H, rv),
                     logits = d.make("logits", DType::F32, T, E), ids = d.make("ids", DType::I32, T, 2),
                     w = d.make("w", DType::F32, T, 2);
        for (const int64_t batch_rows : {1, 2, 9}) {
            SCOPED_TRACE(::testing::Message() << "H " << H << ", batch_rows " << batch_rows);
            be.moe_route(x, router, batch_rows, true, logits, ids, w);
            const std::vector<float> got = d.read(logits);
            int differ = 0;  // from the other order: shows the two are told apart
            for (int64_t t = 0; t < T; ++t)
                for (int64_t e = 0; e < E; ++e) {
                    const float* xr = xv.data() + t * H;
                    const float* rr = rv.data() + e * H;
                    const bool tiny = batch_rows >= 2 && H % 8 == 0;
                    const float want = tiny ? ggml_ref::tinyblas_dot_f32(H, rr, xr) : ggml_ref::vec_dot_f32(H, xr, rr);
                    const float other = tiny ? ggml_ref::vec_dot_f32(H, xr, rr)
                                             : (H % 8 == 0 ? ggml_ref::tinyblas_dot_f32(H, rr, xr) : want);
                    ASSERT_TRUE(same_bits(got[static_cast<size_t>(t * E + e)], want)) << t << " " << e;
                    differ += !same_bits(want, other);
                }
            if (H % 8 == 0) {
                EXPECT_GT(differ, 0);
            }
        }
    }
}

// Routing from the op's logits row by row, bit for bit with the reference (ggml's SOFT_MAX, descending order with
// ties to the lower id, the clamped normalisation): a router of one-hot rows passes chosen logits through, so rows
// with many ties, a NaN, an infinity or nothing finite are routed as the spec says.
TEST(MoeRoute, EveryRowIsTheReferences) {
    cpu::CpuBackend be(2);
    Device d(be);
    const int64_t T = 37, E = 64;
    std::mt19937 rng(11);
    std::vector<float> xv = randn(rng, static_cast<size_t>(T * E), 2.0f);
    for (int64_t i = 0; i < E; ++i) {
        xv[static_cast<size_t>(E + i)] = std::round(xv[static_cast<size_t>(E + i)]);  // row 1: many ties
        xv[static_cast<size_t>(2 * E + i)] = -INFINITY;                               // row 2: none finite
    }
    xv[static_cast<size_t>(3 * E + 5)] = NAN;       // row 3: a NaN, so every logit of the row is NaN
    xv[static_cast<size_t>(4 * E + 9)] = INFINITY;  // row 4: an infinity, the same (0 * inf)
    std::vector<float> identity(static_cast<size_t>(E * E), 0.0f);
    for (int64_t e = 0; e < E; ++e) identity[static_cast<size_t>(e * E + e)] = 1.0f;
    const Tensor x = d.f32("x", T, E, xv), router = d.f32("router", E, E, identity),
                 logits = d.make("logits", DType::F32, T, E);
    for (const int k : {1, 8, 64}) {
        for (const bool normalize : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "k " << k << (normalize ? " normalized" : ""));
            const Tensor ids = d.make("ids", DType::I32, T, k), w = d.make("w", DType::F32, T, k);
            be.moe_route(x, router, 1, normalize, logits, ids, w);
            std::vector<int32_t> got_ids(static_cast<size_t>(T * k));
            be.download(ids, got_ids.data());
            const std::vector<float> got_w = d.read(w), l = d.read(logits);
            for (int64_t t = 0; t < T; ++t) {
                if (t < 2 || t > 4) {
                    for (int64_t e = 0; e < E; ++e)
                        ASSERT_EQ(l[static_cast<size_t>(t * E + e)], xv[static_cast<size_t>(t * E + e)]);
                }
                std::vector<int32_t> want_ids(static_cast<size_t>(k));
                std::vector<float> want_w(static_cast<size_t>(k));
                reference::moe_route_row(l.data() + t * E, E, k, normalize, want_ids.data(), want_w.data());
                for (int j = 0; j < k; ++j) {
                    ASSERT_EQ(got_ids[static_cast<size_t>(t * k + j)], want_ids[static_cast<size_t>(j)]) << t << " " << j;
                    ASSERT_TRUE(same_bits(got_w[static_cast<size_t>(t * k + j)], want_w[static_cast<size_t>(j)]))
                        << t << " " << j;
                }
                if (t >= 2 && t <= 4) {  // nothing finite (0 * inf is NaN): experts 0..k-1, weight 0
                    for (int j = 0; j < k; ++j) {
                        EXPECT_EQ(got_ids[static_cast<size_t>(t * k + j)], j);
                        EXPECT_EQ(got_w[static_cast<size_t>(t * k + j)], 0.0f);
                    }
                }
            }
        }
    }
    // The reference itself on a row worked by hand: softmax of (0, ln 3, ln 2) is (1/6, 3/6, 2/6).
    const float row[3] = {0.0f, std::log(3.0f), std::log(2.0f)};
    int32_t ids[2];
    float w[2];
    reference::moe_route_row(row, 3, 2, true, ids, w);
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(ids[1], 2);
    EXPECT_NEAR(w[0], 0.6, 1e-6);
    EXPECT_NEAR(w[1], 0.4, 1e-6);
}

// ggml::soft_max_row is ggml's SOFT_MAX as ggml_reference.h transcribes it (checked there against llama.cpp's
// captured kq_soft_max), on rows of 8k and 8k + tail elements.
TEST(MoeRoute, SoftMaxRowIsGgmls) {
    std::mt19937 rng(3);
    for (const int64_t n : {8, 64, 128, 13, 3}) {
        const std::vector<float> x = randn(rng, static_cast<size_t>(n), 4.0f);
        std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
        ggml::soft_max_row(x.data(), got.data(), n);
        ggml_ref::soft_max(x.data(), nullptr, n, 1.0f, want.data());
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)])) << n << " " << i;
    }
}

// ---- moe_route_grouped ----

struct Grouped {
    int64_t E, H;
    int n_group, topk_group, k;
    bool normalize;
    float scaling;
};

struct GroupedOut {
    std::vector<float> logits;
    std::vector<int32_t> ids;
    std::vector<float> weights;
};

GroupedOut route_grouped(Device& d, const Grouped& g, const std::vector<float>& x, const std::vector<float>& router,
                         const std::vector<float>& bias) {
    const int64_t T = static_cast<int64_t>(x.size()) / g.H;
    const Tensor logits = d.make("logits", DType::F32, T, g.E), ids = d.make("ids", DType::I32, T, g.k),
                 w = d.make("w", DType::F32, T, g.k);
    d.be.moe_route_grouped(d.f32("x", T, g.H, x), d.f32("router", g.E, g.H, router), d.f32("bias", 1, g.E, bias),
                           g.n_group, g.topk_group, g.normalize, g.scaling, logits, ids, w);
    GroupedOut out{d.read(logits), std::vector<int32_t>(static_cast<size_t>(T * g.k)), d.read(w)};
    d.be.download(ids, out.ids.data());
    return out;
}

// Each row against the reference from the op's own logits: ids exactly, weights to f32 rounding (the reference is
// in double). Random routers with and without normalisation, one with a NaN bias (that expert ranks last).
TEST(MoeRouteGrouped, EveryRowIsTheReferences) {
    cpu::CpuBackend be(2);
    Device d(be);
    std::mt19937 rng(17);
    for (const Grouped g : {Grouped{64, 32, 8, 3, 6, true, 2.5f}, Grouped{16, 24, 4, 2, 3, false, 1.0f},
                            Grouped{8, 16, 4, 4, 8, true, 1.0f}}) {
        SCOPED_TRACE(::testing::Message() << g.E << " experts, " << g.n_group << " groups");
        const int64_t T = 23;
        std::vector<float> bias = randn(rng, static_cast<size_t>(g.E), 0.1f);
        if (g.E == 16) bias[5] = NAN;
        const GroupedOut got = route_grouped(d, g, randn(rng, static_cast<size_t>(T * g.H)),
                                             randn(rng, static_cast<size_t>(g.E * g.H), 0.3f), bias);
        int nan_chosen = 0;
        for (int64_t t = 0; t < T; ++t) {
            std::vector<int32_t> ids(static_cast<size_t>(g.k));
            std::vector<float> w(static_cast<size_t>(g.k));
            reference::moe_route_grouped_row(got.logits.data() + t * g.E, bias.data(), g.E, g.n_group, g.topk_group,
                                             g.k, g.normalize, g.scaling, ids.data(), w.data());
            for (int j = 0; j < g.k; ++j) {
                const size_t at = static_cast<size_t>(t * g.k + j);
                ASSERT_EQ(got.ids[at], ids[static_cast<size_t>(j)]) << t << " " << j;
                EXPECT_NEAR(got.weights[at], w[static_cast<size_t>(j)], 1e-6 * std::abs(w[static_cast<size_t>(j)]))
                    << t << " " << j;
                nan_chosen += g.E == 16 && got.ids[at] == 5;
            }
        }
        EXPECT_EQ(nan_chosen, 0);
    }
}

// Hand cases through a router of one-hot rows (x is the logits), no bias unless said: 8 experts in 4 groups of 2,
// 2 groups kept, k 3.
TEST(MoeRouteGrouped, TiesGoToTheLowerGroupAndTheLowerExpert) {
    cpu::CpuBackend be(2);
    Device d(be);
    const Grouped g{8, 8, 4, 2, 3, true, 2.0f};
    std::vector<float> identity(64, 0.0f);
    for (int e = 0; e < 8; ++e) identity[static_cast<size_t>(e * 8 + e)] = 1.0f;
    const std::vector<float> rows = {
        3, 2, 1, 0.5f, -1, -2, 0.5f, 1,  // groups 1 and 3 tie for second place: group 1 is kept -> 0, 1, 2
        0, 5, -3, -3, 5, 0, -3, -3,      // groups 0 and 2 tie, experts 1 and 4 tie, then 0 and 5 -> 1, 4, 0
        0, 0, 0, 0, 0, 0, 0, 0,          // everything ties: groups 0 and 1, experts 0, 1, 2
        0, 0, 0, 0, 0, 0, 0, 0,          // with the bias below: group 3 first, then 0 -> 7, 6, 0 (weights 1/3 each)
    };
    const GroupedOut ties = route_grouped(d, g, std::vector<float>(rows.begin(), rows.begin() + 24), identity,
                                          std::vector<float>(8, 0.0f));
    EXPECT_EQ(ties.ids, (std::vector<int32_t>{0, 1, 2, 1, 4, 0, 0, 1, 2}));
    std::vector<float> bias(8, 0.0f);
    bias[7] = 1.0f;
    bias[6] = 0.5f;
    const GroupedOut biased = route_grouped(d, g, std::vector<float>(rows.begin() + 24, rows.end()), identity, bias);
    EXPECT_EQ(biased.ids, (std::vector<int32_t>{7, 6, 0}));
    for (const float w : biased.weights) EXPECT_FLOAT_EQ(w, 2.0f / 3.0f) << "the bias selects but does not weigh";
    // The reference agrees on every hand row.
    for (int64_t t = 0; t < 4; ++t) {
        std::vector<int32_t> ids(3);
        std::vector<float> w(3);
        reference::moe_route_grouped_row(rows.data() + t * 8, t < 3 ? std::vector<float>(8, 0.0f).data() : bias.data(),
                                         8, 4, 2, 3, true, 2.0, ids.data(), w.data());
        const std::vector<int32_t>& got = t < 3 ? ties.ids : biased.ids;
        const int64_t r = t < 3 ? t : 0;
        EXPECT_EQ(ids, std::vector<int32_t>(got.begin() + r * 3, got.begin() + (r + 1) * 3)) << "row " << t;
    }
}

// testdata/ops/moe_route_grouped.json (scripts/make_moe_route_goldens.py): the float64 reference model's routing of
// seeded rows, through the tiny checkpoint's layer-1 router and two synthetic ones. Every boundary there is at least
// 1e-4 wide, so f32 picks the same experts; the weights agree to f32 rounding.
TEST(MoeRouteGrouped, MatchesTheReferenceModelsRoutes) {
    cpu::CpuBackend be(2);
    Device d(be);
    const auto goldens = nlohmann::json::parse(testing::read_text("testdata/ops/moe_route_grouped.json"));
    int cases = 0;
    for (const auto& c : goldens.at("cases")) {
        SCOPED_TRACE(c.at("name").get<std::string>());
        const Grouped g{c.at("experts").get<int64_t>(), c.at("hidden").get<int64_t>(), c.at("n_group").get<int>(),
                        c.at("topk_group").get<int>(), c.at("k").get<int>(), c.at("normalize").get<bool>(),
                        c.at("scaling").get<float>()};
        const auto floats = [&](const char* key) {
            const std::vector<double> v = c.at(key).get<std::vector<double>>();
            return std::vector<float>(v.begin(), v.end());
        };
        const GroupedOut got = route_grouped(d, g, floats("x"), floats("router"), floats("bias"));
        const int64_t T = c.at("rows").get<int64_t>();
        for (int64_t t = 0; t < T; ++t) {
            const auto ids = c.at("ids")[static_cast<size_t>(t)].get<std::vector<int32_t>>();
            const auto w = c.at("weights")[static_cast<size_t>(t)].get<std::vector<double>>();
            for (int j = 0; j < g.k; ++j) {
                const size_t at = static_cast<size_t>(t * g.k + j);
                EXPECT_EQ(got.ids[at], ids[static_cast<size_t>(j)]) << t << " " << j;
                EXPECT_NEAR(got.weights[at], w[static_cast<size_t>(j)], 1e-5 * std::abs(w[static_cast<size_t>(j)]))
                    << t << " " << j;
            }
        }
        ++cases;
    }
    EXPECT_EQ(cases, 3);
}

// A row's logits, ids and weights are the same bits computed alone as among 8 others (batch invariance).
TEST(MoeRouteGrouped, ARowAloneEqualsTheRowInABatch) {
    cpu::CpuBackend be(3);
    Device d(be);
    std::mt19937 rng(23);
    const Grouped g{64, 48, 8, 4, 8, true, 2.5f};
    const int64_t T = 9;
    const std::vector<float> x = randn(rng, static_cast<size_t>(T * g.H)),
                             router = randn(rng, static_cast<size_t>(g.E * g.H), 0.2f),
                             bias = randn(rng, static_cast<size_t>(g.E), 0.05f);
    const GroupedOut batch = route_grouped(d, g, x, router, bias);
    for (int64_t t = 0; t < T; ++t) {
        const GroupedOut alone =
            route_grouped(d, g, std::vector<float>(x.begin() + t * g.H, x.begin() + (t + 1) * g.H), router, bias);
        for (int64_t e = 0; e < g.E; ++e)
            ASSERT_TRUE(same_bits(alone.logits[static_cast<size_t>(e)], batch.logits[static_cast<size_t>(t * g.E + e)]))
                << t << " " << e;
        for (int j = 0; j < g.k; ++j) {
            ASSERT_EQ(alone.ids[static_cast<size_t>(j)], batch.ids[static_cast<size_t>(t * g.k + j)]) << t << " " << j;
            const float wa = alone.weights[static_cast<size_t>(j)], wb = batch.weights[static_cast<size_t>(t * g.k + j)];
            ASSERT_TRUE(same_bits(wa, wb)) << t << " " << j;
        }
    }
}

TEST(MoeRouteGrouped, BadGroupsAreRefusedByName) {
    cpu::CpuBackend be(1);
    Device d(be);
    const Tensor x = d.make("x", DType::F32, 3, 16), router = d.make("router", DType::F32, 8, 16),
                 bias = d.make("bias", DType::F32, 1, 8), logits = d.make("logits", DType::F32, 3, 8),
                 ids = d.make("ids", DType::I32, 3, 2), w = d.make("w", DType::F32, 3, 2);
    const auto refused = [&](int n_group, int topk_group, const Tensor& b, const Tensor& i, const Tensor& wt) {
        try {
            be.moe_route_grouped(x, router, b, n_group, topk_group, true, 1.0f, logits, i, wt);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what()).find("moe_route_grouped") != std::string::npos;
        }
        return false;
    };
    EXPECT_FALSE(refused(4, 2, bias, ids, w));                      // valid
    EXPECT_TRUE(refused(3, 2, bias, ids, w));                       // 8 experts are not 3 groups
    EXPECT_TRUE(refused(8, 2, bias, ids, w));                       // groups of 1 expert have no top 2
    EXPECT_TRUE(refused(4, 5, bias, ids, w));                       // more groups kept than there are
    EXPECT_TRUE(refused(4, 0, bias, ids, w));                       // none kept
    EXPECT_TRUE(refused(4, 1, bias, d.make("i3", DType::I32, 3, 3), d.make("w3", DType::F32, 3, 3)));  // k 3 > 2 kept
    EXPECT_TRUE(refused(4, 2, d.make("b7", DType::F32, 1, 7), ids, w));  // a bias per expert
    EXPECT_TRUE(refused(4, 2, bias, w, w));                              // ids not i32
}

TEST_P(OpConformance, MoeRouteGroupedMatchesTheCpuReference) {
    using namespace conformance;
    const int64_t T = 7, E = 32, H = 40, k = 4;
    std::vector<float> bias = conformance::randn(rng_, E, 0.1f);
    check({{"moe_route_grouped",
            {f32("x", T, H, conformance::randn(rng_, T * H)),
             f32("router", E, H, conformance::randn(rng_, E * H, 0.3f)), f32("bias", 1, E, bias), f32("logits", T, E, std::vector<float>(T * E)),
             i32("ids", T, k, std::vector<int32_t>(T * k)), f32("w", T, k, std::vector<float>(T * k))},
            {3, 4, 5},
            kReduction,
            [](Backend& be, const Bound& b) {
                be.moe_route_grouped(b.t[0], b.t[1], b.t[2], 8, 3, true, 2.5f, b.t[3], b.t[4], b.t[5]);
            }}});
}

struct Layer {
    int64_t E, H, I, k;
    Tensor gate, up, down;
    MoeExperts experts() const { return MoeExperts{&gate, &up, &down, E, Activation::Silu}; }
};

Layer make_layer(Device& d, DType dt, int64_t E, int64_t H, int64_t I, int64_t k, std::mt19937& rng,
                 std::vector<float>* gate = nullptr, std::vector<float>* up = nullptr, std::vector<float>* down = nullptr) {
    std::vector<float> g = randn(rng, static_cast<size_t>(E * I * H), 0.1f), u = randn(rng, g.size(), 0.1f),
                       dn = randn(rng, static_cast<size_t>(E * H * I), 0.1f);
    Layer l{E, H, I, k, d.weight("gate_exps", dt, E * I, H, g), d.weight("up_exps", dt, E * I, H, u),
            d.weight("down_exps", dt, E * H, I, dn)};
    if (gate) *gate = g;
    if (up) *up = u;
    if (down) *down = dn;
    return l;
}

// Row t's output as the backend's own ops compute each (row, slot): the row by the expert's slices, glu, the down
// product, then the weighted sum in slot order (ids outside [0, E) skipped). Each product in the order of a product
// of batch_rows rows, or with `by_expert` of as many rows as the pairs in `ids` that chose its expert.
std::vector<float> composed(Device& d, const Layer& l, const std::vector<float>& x, const std::vector<int32_t>& ids,
                            const std::vector<float>& w, int64_t t, int64_t batch_rows, bool by_expert = false) {
    Backend& be = d.be;
    const Tensor xt = d.f32("x_t", 1, l.H, std::vector<float>(x.begin() + t * l.H, x.begin() + (t + 1) * l.H));
    const Tensor g = d.make("g", DType::F32, 1, l.I), u = d.make("u", DType::F32, 1, l.I),
                 y = d.make("y", DType::F32, 1, l.H);
    std::vector<float> out(static_cast<size_t>(l.H), 0.0f);
    bool first = true;
    for (int64_t j = 0; j < l.k; ++j) {
        const int32_t e = ids[static_cast<size_t>(t * l.k + j)];
        if (e < 0 || e >= l.E) continue;
        const int64_t rows = by_expert ? std::count(ids.begin(), ids.end(), e) : batch_rows;
        be.matmul(xt, l.gate.slice_rows(e * l.I, l.I), nullptr, g, rows);
        be.matmul(xt, l.up.slice_rows(e * l.I, l.I), nullptr, u, rows);
        be.glu(g, u, Activation::Silu, g);
        be.matmul(g, l.down.slice_rows(e * l.H, l.H), nullptr, y, rows);
        const std::vector<float> yv = d.read(y);
        const float wt = w[static_cast<size_t>(t * l.k + j)];
        for (int64_t c = 0; c < l.H; ++c) {
            const float term = wt * yv[static_cast<size_t>(c)];
            out[static_cast<size_t>(c)] = first ? term : out[static_cast<size_t>(c)] + term;
        }
        first = false;
    }
    return out;
}

// Ids with overlapping and disjoint experts across rows, one slot outside [0, E), one row with a repeated expert.
std::vector<int32_t> route(int64_t T, int64_t k, int64_t E, std::mt19937& rng) {
    std::vector<int32_t> ids(static_cast<size_t>(T * k));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = static_cast<int32_t>((t * 3 + j * 5 + rng() % 2) % E);
    ids[1] = static_cast<int32_t>(E);  // contributes nothing
    if (T > 2) ids[static_cast<size_t>(2 * k + 1)] = ids[static_cast<size_t>(2 * k)];
    return ids;
}

class MoeFfnWeights : public ::testing::TestWithParam<DType> {};

// A decode step's rows (batch_rows 1) each give what they give alone. A forward's rows (batch_rows T) sum each
// expert's products in the order of as many rows as chose it: for the K types, expert 0 (chosen by 8 rows) takes
// the tiled order and the others vec_dot's, as ggml's MUL_MAT_ID; a piece of such a forward is refused.
TEST_P(MoeFfnWeights, EachRowIsItsExpertsWeightedInSlotOrderAndAloneAsAmongOthers) {
    const DType dt = GetParam();
    cpu::CpuBackend be(2);
    Device d(be);
    std::mt19937 rng(5);
    const bool k_type = !dtype_row_ok(dtype_unpacked(dt), 64);  // blocks of 256
    const int64_t E = 6, H = k_type ? 256 : 64, I = k_type ? 512 : 96, k = 3, T = 9;
    const Layer l = make_layer(d, dt, E, H, I, k, rng);
    const std::vector<float> x = randn(rng, static_cast<size_t>(T * H));
    std::vector<int32_t> ids = route(T, k, E, rng);
    for (int64_t t = 0; t < kGgmlTiledMinRows; ++t) ids[static_cast<size_t>(t * k + k - 1)] = 0;
    std::vector<float> w = randn(rng, static_cast<size_t>(T * k), 0.5f);
    const bool by_expert = ggml_has_tiled_order(dt);
    for (const int64_t batch_rows : {int64_t{1}, T}) {
        SCOPED_TRACE(::testing::Message() << "batch_rows " << batch_rows);
        const Tensor xt = d.f32("x", T, H, x), it = d.i32("ids", T, k, ids), wt = d.f32("w", T, k, w);
        const Tensor out = d.make("out", DType::F32, T, H);
        be.moe_ffn(xt, it, wt, l.experts(), out, batch_rows);
        const std::vector<float> got = d.read(out);
        for (int64_t t = 0; t < T; ++t) {
            const std::vector<float> want = composed(d, l, x, ids, w, t, batch_rows, by_expert && batch_rows > 1);
            for (int64_t c = 0; c < H; ++c)
                ASSERT_TRUE(same_bits(got[static_cast<size_t>(t * H + c)], want[static_cast<size_t>(c)]))
                    << "row " << t << " col " << c << ": " << got[static_cast<size_t>(t * H + c)] << " vs "
                    << want[static_cast<size_t>(c)];
            if (by_expert && batch_rows > 1) continue;
            // The row alone gives the same bits.
            const Tensor x1 = d.f32("x1", 1, H, std::vector<float>(x.begin() + t * H, x.begin() + (t + 1) * H));
            const Tensor i1 = d.i32("i1", 1, k, std::vector<int32_t>(ids.begin() + t * k, ids.begin() + (t + 1) * k));
            const Tensor w1 = d.f32("w1", 1, k, std::vector<float>(w.begin() + t * k, w.begin() + (t + 1) * k));
            const Tensor o1 = d.make("o1", DType::F32, 1, H);
            be.moe_ffn(x1, i1, w1, l.experts(), o1, batch_rows);
            const std::vector<float> alone = d.read(o1);
            for (int64_t c = 0; c < H; ++c)
                ASSERT_TRUE(same_bits(alone[static_cast<size_t>(c)], got[static_cast<size_t>(t * H + c)]))
                    << "row " << t << " col " << c << ": " << alone[static_cast<size_t>(c)] << " alone vs "
                    << got[static_cast<size_t>(t * H + c)];
        }
    }
    if (by_expert) {
        const Tensor x3 = d.f32("x3", 3, H, std::vector<float>(x.begin(), x.begin() + 3 * H));
        const Tensor i3 = d.i32("i3", 3, k, std::vector<int32_t>(ids.begin(), ids.begin() + 3 * k));
        const Tensor w3 = d.f32("w3", 3, k, std::vector<float>(w.begin(), w.begin() + 3 * k));
        EXPECT_THROW(be.moe_ffn(x3, i3, w3, l.experts(), d.make("o3", DType::F32, 3, H), T), std::invalid_argument);
    }
}

INSTANTIATE_TEST_SUITE_P(Types, MoeFfnWeights,
                         ::testing::Values(DType::F32, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K,
                                           DType::Q8_0_R16, DType::Q4_0_R16, DType::Q4_K_R16, DType::Q6_K_R16),
                         [](const auto& type) { return std::string(dtype_name(type.param)); });

// f32 experts against the definition in double precision.
TEST(MoeFfn, F32ExpertsFollowTheDefinition) {
    cpu::CpuBackend be(2);
    Device d(be);
    std::mt19937 rng(7);
    const int64_t E = 4, H = 32, I = 48, k = 2, T = 5;
    std::vector<float> g, u, dn;
    const Layer l = make_layer(d, DType::F32, E, H, I, k, rng, &g, &u, &dn);
    const std::vector<float> x = randn(rng, static_cast<size_t>(T * H));
    const std::vector<int32_t> ids = {0, 3, 1, 1, 2, 0, 3, 2, 1, 0};
    const std::vector<float> w = randn(rng, static_cast<size_t>(T * k));
    const Tensor out = d.make("out", DType::F32, T, H);
    be.moe_ffn(d.f32("x", T, H, x), d.i32("ids", T, k, ids), d.f32("w", T, k, w), l.experts(), out);
    const std::vector<float> got = d.read(out);
    for (int64_t t = 0; t < T; ++t) {
        std::vector<double> want(static_cast<size_t>(H), 0.0);
        for (int64_t j = 0; j < k; ++j) {
            const int64_t e = ids[static_cast<size_t>(t * k + j)];
            std::vector<double> h(static_cast<size_t>(I));
            for (int64_t i = 0; i < I; ++i) {
                double a = 0, b = 0;
                for (int64_t c = 0; c < H; ++c) {
                    a += static_cast<double>(g[static_cast<size_t>((e * I + i) * H + c)]) * x[static_cast<size_t>(t * H + c)];
                    b += static_cast<double>(u[static_cast<size_t>((e * I + i) * H + c)]) * x[static_cast<size_t>(t * H + c)];
                }
                h[static_cast<size_t>(i)] = a / (1 + std::exp(-a)) * b;
            }
            for (int64_t c = 0; c < H; ++c) {
                double y = 0;
                for (int64_t i = 0; i < I; ++i) y += static_cast<double>(dn[static_cast<size_t>((e * H + c) * I + i)]) * h[static_cast<size_t>(i)];
                want[static_cast<size_t>(c)] += w[static_cast<size_t>(t * k + j)] * y;
            }
        }
        for (int64_t c = 0; c < H; ++c) EXPECT_NEAR(got[static_cast<size_t>(t * H + c)], want[static_cast<size_t>(c)], 1e-4) << t << " " << c;
    }
}

// Route and FFN recorded once: each replay routes from the rows uploaded before it (the experts change from replay
// to replay), equals the eager ops and allocates nothing.
TEST(MoeFfn, AGraphRoutesOnTheDeviceAsEagerCallsDo) {
    cpu::CpuBackend be(2);
    Device d(be);
    std::mt19937 rng(9);
    const int64_t E = 8, H = 64, I = 32, k = 2, T = 4;
    const Layer l = make_layer(d, DType::Q8_0, E, H, I, k, rng);
    const Tensor x = d.f32("x", T, H, randn(rng, static_cast<size_t>(T * H)));
    const Tensor router = d.f32("router", E, H, randn(rng, static_cast<size_t>(E * H)));
    const Tensor logits = d.make("logits", DType::F32, T, E), ids = d.make("ids", DType::I32, T, k),
                 w = d.make("w", DType::F32, T, k), out = d.make("out", DType::F32, T, H),
                 eager = d.make("eager", DType::F32, T, H);
    be.moe_route(x, router, 1, true, logits, ids, w);
    be.moe_ffn(x, ids, w, l.experts(), out);  // warms the backend's scratch
    be.begin_capture();
    be.moe_route(x, router, 1, true, logits, ids, w);
    be.moe_ffn(x, ids, w, l.experts(), out);
    const GraphId graph = be.end_capture();
    uint64_t allocations = 0;
    std::vector<int32_t> previous;
    int changed = 0;
    for (int step = 0; step < 6; ++step) {
        be.upload(x, randn(rng, static_cast<size_t>(T * H), 3.0f).data());
        const uint64_t before = testing::heap_allocations().load();
        be.replay(graph);
        allocations += testing::heap_allocations().load() - before;
        std::vector<int32_t> chosen(static_cast<size_t>(T * k));
        be.download(ids, chosen.data());
        changed += chosen != previous;
        previous = chosen;
        const std::vector<float> replayed = d.read(out);
        be.moe_route(x, router, 1, true, logits, ids, w);
        be.moe_ffn(x, ids, w, l.experts(), eager);
        ASSERT_EQ(replayed, d.read(eager)) << "step " << step;
    }
    EXPECT_EQ(allocations, 0u);
    EXPECT_GE(changed, 5);
    be.destroy_graph(graph);
}

TEST(MoeOps, BadShapesAreRefusedByName) {
    cpu::CpuBackend be(1);
    Device d(be);
    std::mt19937 rng(1);
    const Layer l = make_layer(d, DType::F32, 4, 16, 8, 2, rng);
    const Tensor x = d.make("x", DType::F32, 3, 16), ids = d.make("ids", DType::I32, 3, 2),
                 w = d.make("w", DType::F32, 3, 2), out = d.make("out", DType::F32, 3, 16);
    const Tensor logits = d.make("logits", DType::F32, 3, 4), router = d.make("router", DType::F32, 4, 16);
    EXPECT_THROW(be.moe_route(x, router, 1, true, logits, d.make("ids5", DType::I32, 3, 5), d.make("w5", DType::F32, 3, 5)),
                 std::invalid_argument);  // k > experts
    EXPECT_THROW(be.moe_route(x, router, 1, true, logits, w, w), std::invalid_argument);  // ids not i32
    EXPECT_THROW(be.moe_route(x, d.make("r8", DType::F32, 4, 8), 1, true, logits, ids, w),
                 std::invalid_argument);  // router width is not x's
    EXPECT_THROW(be.moe_route(x, router, 0, true, logits, ids, w), std::invalid_argument);  // batch_rows 0
    MoeExperts bad = l.experts();
    bad.count = 3;  // 32 gate rows are not 3 experts' rows
    EXPECT_THROW(be.moe_ffn(x, ids, w, bad, out), std::invalid_argument);
    EXPECT_THROW(be.moe_ffn(x, ids, w, l.experts(), d.make("o", DType::F32, 3, 8)), std::invalid_argument);
    try {
        be.moe_ffn(x, ids, w, MoeExperts{&l.gate, &l.up, &l.gate, 4, Activation::Silu}, out);
        FAIL() << "down with gate's shape";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("moe_ffn"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace tracelm
