// DeepSeek's latent-attention ops on the CPU backend (ops/mla/mla.h): mla_attention against the double-precision
// expanded definition (dense and over selections, f32 and f16 caches), sparse with every position == dense bit for
// bit, mla_absorb against a double product and row by row, cache_write's layout and rounding, and rope_neox over the
// first part of each head (the indexer's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "ops/mla/mla.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

// Two sequences, the first with 3 new rows after 8 cached positions (a prefill piece), the second one decode row;
// blocks scattered, the second sequence's second block unassigned (its positions are skipped).
class Mla : public testing::BackendTest {
   protected:
    Mla() : BackendTest(11) {}
    static constexpr int heads = 3, L = 16, R = 8, bs = 4, num_blocks = 8, max_blocks = 4, T = 4;
    const std::vector<int32_t> seq_lens = {11, 10}, qsl = {0, 3, 4};
    const std::vector<int32_t> tables = {6, 1, 3, -1, 2, -1, 7, -1};
    const float scale = 0.25f;
    std::vector<float> q_lat = randn(T * heads * L), q_pe = randn(T * heads * R),
                       cache = randn(num_blocks * bs * (L + R));
    AttentionMeta meta;
    void SetUp() override {
        meta = AttentionMeta{i32("bt", 2, max_blocks, tables), i32("lens", 1, 2, seq_lens), i32("qsl", 1, 3, qsl), 2,
                             bs};
    }
    Tensor cache_tensor(DType dt) {
        if (dt == DType::F32) return f32("cache", num_blocks * bs, L + R, cache);
        std::vector<uint16_t> h(cache.size());
        for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(cache[i]);
        return make("cache16", DType::F16, num_blocks * bs, L + R, h);
    }
    std::vector<float> run(const Tensor& c, const std::vector<int64_t>* indices, int64_t topk) {
        const Tensor out = f32("out", T, heads * L, std::vector<float>(T * heads * L, 9.0f));
        const Tensor idx = indices ? i64("idx", T, topk, *indices) : Tensor{};
        be.mla_attention(f32("ql", T, heads * L, q_lat), f32("qp", T, heads * R, q_pe), c, meta,
                         indices ? &idx : nullptr, heads, scale, out);
        return get<float>(out);
    }
    std::vector<double> reference(const std::vector<float>& values, const std::vector<std::vector<int64_t>>& sel) {
        return reference::mla_attention(q_lat, q_pe, values, tables, max_blocks, seq_lens, qsl, bs, heads, L, R, scale,
                                        sel);
    }
};

TEST_F(Mla, DenseAttentionMatchesTheExpandedDefinition) {
    for (const DType dt : {DType::F32, DType::F16}) {
        std::vector<float> values = cache;
        if (dt == DType::F16)
            for (float& v : values) v = f16_to_f32(f32_to_f16(v));
        const std::vector<float> got = run(cache_tensor(dt), nullptr, 0);
        const std::vector<double> want = reference(values, {});
        for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << i;
    }
}

TEST_F(Mla, SelectedPositionsMatchTheExpandedDefinitionAndAllOfThemAreDense) {
    const Tensor c = cache_tensor(DType::F32);
    // Row t's selection in ascending order, -1 padded; positions it may not see or without a block are skipped.
    const std::vector<std::vector<int64_t>> sel = {{0, 3, 9}, {1, 2, 8, 9, 12}, {0, 4, 5, 10}, {2, 5, 9}};
    constexpr int64_t topk = 6;
    std::vector<int64_t> flat(T * topk, -1);
    for (int t = 0; t < T; ++t) std::copy(sel[t].begin(), sel[t].end(), flat.begin() + t * topk);
    const std::vector<float> got = run(c, &flat, topk);
    const std::vector<double> want = reference(cache, sel);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << i;

    constexpr int64_t all = 12;
    std::vector<int64_t> every(T * all, -1);
    for (int t = 0; t < T; ++t)
        for (int64_t p = 0; p < all; ++p) every[t * all + p] = p;  // invisible ones are skipped
    EXPECT_TRUE(run(c, &every, all) == run(c, nullptr, 0));
}

TEST_F(Mla, AbsorbIsEachHeadsOwnProductRowByRow) {
    constexpr int64_t K = 12, N = 5;
    const std::vector<float> x = randn(T * heads * K), w = randn(heads * N * K);
    for (const DType dt : {DType::F32, DType::BF16, DType::F16}) {
        std::vector<float> wv = w;
        Tensor wt;
        if (dt == DType::F32) {
            wt = f32("w", heads * N, K, w);
        } else {
            std::vector<uint16_t> h(w.size());
            for (size_t i = 0; i < h.size(); ++i) {
                h[i] = dt == DType::BF16 ? f32_to_bf16(w[i]) : f32_to_f16(w[i]);
                wv[i] = dt == DType::BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
            }
            wt = make("w16", dt, heads * N, K, h);
        }
        const Tensor xt = f32("x", T, heads * K, x), out = f32("out", T, heads * N, std::vector<float>(T * heads * N));
        be.mla_absorb(xt, wt, heads, out);
        const std::vector<float> got = get<float>(out);
        // The worst scaled error against exact math over x as given or (bf16 weights on kernels with AVX512_BF16,
        // as matmul's) x rounded to bf16.
        const auto error = [&](bool round_x) {
            double worst = 0.0;
            for (int t = 0; t < T; ++t)
                for (int h = 0; h < heads; ++h)
                    for (int n = 0; n < N; ++n) {
                        double want = 0.0;
                        for (int k = 0; k < K; ++k) {
                            const float xv = x[(t * heads + h) * K + k];
                            want += static_cast<double>(round_x ? bf16_to_f32(f32_to_bf16(xv)) : xv) * wv[(h * N + n) * K + k];
                        }
                        worst = std::max(worst, std::abs(got[(t * heads + h) * N + n] - want) / (1 + std::abs(want)));
                    }
            return worst;
        };
        EXPECT_LE(std::min(error(false), dt == DType::BF16 ? error(true) : 1.0), 1e-5) << dtype_name(dt);
        const Tensor one = f32("one", 1, heads * N, std::vector<float>(heads * N));
        be.mla_absorb(xt.slice_rows(2, 1), wt, heads, one);
        const std::vector<float> row = get<float>(one);
        EXPECT_TRUE(std::equal(row.begin(), row.end(), got.begin() + 2 * heads * N)) << "row 2 alone";
    }
    EXPECT_THROW(be.mla_absorb(f32("x2", T, heads * K, x), f32("w2", heads * N, K + 1, randn(heads * N * (K + 1))), heads,
                               f32("o2", T, heads * N, std::vector<float>(T * heads * N))),
                 std::invalid_argument);
}

TEST_F(Mla, CacheWritePutsThePartsSideBySideAtEachSlot) {
    constexpr int rows = 3, slots = 5;
    const std::vector<float> a = randn(rows * L), b = randn(rows * R);
    const std::vector<int32_t> where = {4, -1, 0};  // the second row goes nowhere
    for (const DType dt : {DType::F32, DType::F16}) {
        const size_t es = dt == DType::F32 ? 4 : 2;
        const Tensor c = whole(be.alloc(slots * (L + R) * es, "c"), dt, slots, L + R);
        const Tensor parts[] = {f32("a", rows, L, a), f32("b", rows, R, b)};
        be.cache_write(parts, i32("slots", 1, rows, where), c);
        std::vector<float> got(slots * (L + R));
        if (dt == DType::F32) {
            got = get<float>(c);
        } else {
            const std::vector<uint16_t> h = get<uint16_t>(c);
            for (size_t i = 0; i < h.size(); ++i) got[i] = f16_to_f32(h[i]);
        }
        const auto stored = [&](float v) { return dt == DType::F32 ? v : f16_to_f32(f32_to_f16(v)); };
        for (int r = 0; r < rows; ++r) {
            if (where[r] < 0) continue;
            for (int i = 0; i < L; ++i) EXPECT_EQ(got[where[r] * (L + R) + i], stored(a[r * L + i]));
            for (int i = 0; i < R; ++i) EXPECT_EQ(got[where[r] * (L + R) + L + i], stored(b[r * R + i]));
        }
        for (int i = 0; i < L + R; ++i) EXPECT_EQ(got[2 * (L + R) + i], 0.0f) << "untouched slot";
        const Tensor wrong[] = {f32("a2", rows, L, a)};
        EXPECT_THROW(be.cache_write(wrong, i32("s2", 1, rows, where), c), std::invalid_argument);
    }
}

TEST_F(Mla, RopeOverTheFirstPartOfEachHeadIsRopeOfThatPart) {
    constexpr int rows = 3, hs = 4, hd = 8, stride = 20;
    const std::vector<float> x = randn(rows * hs * stride);
    const std::vector<int32_t> pos = {0, 7, 300};
    const RopeSpec rope{10000.0f, {}};
    const Tensor strided = f32("x", rows, hs * stride, x);
    be.rope_neox(strided, i32("p", 1, rows, pos), hs, hd, rope, stride);
    std::vector<float> part(rows * hs * hd);
    for (int r = 0; r < rows * hs; ++r) std::copy_n(x.begin() + r * stride, hd, part.begin() + r * hd);
    const Tensor compact = f32("c", rows, hs * hd, part);
    be.rope_neox(compact, i32("p2", 1, rows, pos), hs, hd, rope);
    const std::vector<float> got = get<float>(strided), want = get<float>(compact);
    for (int r = 0; r < rows * hs; ++r) {
        EXPECT_TRUE(std::equal(want.begin() + r * hd, want.begin() + (r + 1) * hd, got.begin() + r * stride)) << r;
        EXPECT_TRUE(std::equal(x.begin() + r * stride + hd, x.begin() + (r + 1) * stride, got.begin() + r * stride + hd));
    }
}

}  // namespace
}  // namespace tracelm
