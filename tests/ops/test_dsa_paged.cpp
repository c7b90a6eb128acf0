// The DSA ops of a paged, captured step on the CPU backend: dsa_indexer_paged against dsa_indexer on each sequence's
// keys copied out of the pool (bit for bit) and against the double-precision reference; dsa_topk_causal against
// dsa_topk with the windows worked out on the host and against its reference, and on the indexer scores of
// testdata/models/tiny-deepseek-v32/reference_goldens.json (layer 0, sparse mode) against the positions the
// float64 model selected.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "ops/attention/attention.h"
#include "ops/dsa/dsa_indexer.h"
#include "ops/dsa/dsa_topk.h"
#include "support/reference_check.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using testing::same_bits;

// A step of three sequences over a pool of 4-token blocks in a shuffled order: a prefill chunk after earlier
// context (q_len 3 of 11), a whole prompt (7 of 7) whose second block is unassigned, a decode row (1 of 21), and
// one padded row of no sequence.
class DsaPaged : public testing::OpReferenceTest {
   protected:
    static constexpr int H = 4, D = 16, bs = 4, num_blocks = 24, max_blocks = 7, max_keys = 28, S = 3, T = 12;
    const std::vector<int32_t> seq_lens = {11, 7, 21}, qsl = {0, 3, 10, 11};
    std::vector<int32_t> table;
    reference::PagedAttentionMeta host;
    AttentionMeta meta;

    void SetUp() override {
        std::vector<int32_t> pool(num_blocks);
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng);
        table.assign(S * max_blocks, -1);
        size_t next = 0;
        for (int s = 0; s < S; ++s)
            for (int b = 0; b < (seq_lens[s] + bs - 1) / bs; ++b) table[s * max_blocks + b] = pool[next++];
        table[max_blocks + 1] = -1;
        host = {table, max_blocks, seq_lens, qsl, bs};
        meta = AttentionMeta{i32("bt", S, max_blocks, table), i32("lens", 1, S, seq_lens),
                             i32("qsl", 1, S + 1, qsl), S, bs};
    }
    int seq_of(int t) const { return t < qsl[1] ? 0 : t < qsl[2] ? 1 : t < qsl[3] ? 2 : -1; }
    int64_t window_end(int t) const {
        const int s = seq_of(t);
        return s < 0 ? 0 : seq_lens[s] - (qsl[s + 1] - qsl[s]) + (t - qsl[s]) + 1;
    }
};

constexpr float kUnwritten = 12345.0f;

TEST_F(DsaPaged, IndexerPagedEqualsTheIndexerOnEachSequencesKeysBitForBit) {
    const auto q = randn(T * H * D), w = randn(T * H), cache = randn(num_blocks * bs * D);
    const Tensor scores = f32("scores", T, max_keys, std::vector<float>(T * max_keys, kUnwritten));
    be.dsa_indexer_paged(f32("q", T, H * D, q), f32("w", T, H, w), f32("cache", num_blocks * bs, D, cache), meta, H,
                         scores);
    const std::vector<float> got = get<float>(scores);
    int unassigned = 0;
    for (int s = 0; s < S; ++s) {
        // The sequence's keys in position order, and its rows alone, through the contiguous indexer.
        std::vector<float> keys(static_cast<size_t>(seq_lens[s]) * D, 0.0f);
        for (int p = 0; p < seq_lens[s]; ++p) {
            const int32_t block = table[s * max_blocks + p / bs];
            if (block >= 0) std::copy_n(cache.begin() + (block * bs + p % bs) * D, D, keys.begin() + p * D);
        }
        const int rows = qsl[s + 1] - qsl[s];
        const Tensor want_t = f32("want", rows, seq_lens[s], std::vector<float>(rows * seq_lens[s]));
        const std::vector<float> qs(q.begin() + qsl[s] * H * D, q.begin() + qsl[s + 1] * H * D),
            ws(w.begin() + qsl[s] * H, w.begin() + qsl[s + 1] * H);
        be.dsa_indexer(f32("qs", rows, H * D, qs), f32("ws", rows, H, ws), f32("keys", seq_lens[s], D, keys), H,
                       want_t);
        const std::vector<float> want = get<float>(want_t);
        for (int i = 0; i < rows; ++i) {
            const int t = qsl[s] + i;
            ASSERT_EQ(window_end(t), seq_lens[s] - rows + i + 1);
            for (int p = 0; p < max_keys; ++p) {
                const float g = got[t * max_keys + p];
                if (p >= window_end(t)) {
                    EXPECT_EQ(g, kUnwritten) << "row " << t << " wrote position " << p << " past its window";
                } else if (table[s * max_blocks + p / bs] < 0) {
                    EXPECT_EQ(g, -INFINITY) << "row " << t << " position " << p << " has no block";
                    ++unassigned;
                } else {
                    EXPECT_TRUE(same_bits(g, want[i * seq_lens[s] + p])) << "row " << t << " position " << p;
                }
            }
        }
    }
    EXPECT_GT(unassigned, 0);
    for (int p = 0; p < max_keys; ++p) EXPECT_EQ(got[(T - 1) * max_keys + p], kUnwritten) << "the padded row";
}

TEST_F(DsaPaged, IndexerPagedMatchesTheDoubleReference) {
    const auto q = randn(T * H * D), w = randn(T * H), cache = randn(num_blocks * bs * D);
    const Tensor scores = f32("scores", T, max_keys, std::vector<float>(T * max_keys, kUnwritten));
    be.dsa_indexer_paged(f32("q", T, H * D, q), f32("w", T, H, w), f32("cache", num_blocks * bs, D, cache), meta, H,
                         scores);
    const std::vector<float> got = get<float>(scores);
    const std::vector<double> want = reference::dsa_indexer_paged(q, w, cache, host, H, D, max_keys);
    int compared = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(want[i])) continue;  // unspecified
        if (std::isinf(want[i])) {
            EXPECT_EQ(got[i], want[i]) << i;
        } else {
            EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
        }
        ++compared;
    }
    EXPECT_EQ(compared, (9 + 10 + 11) + (1 + 2 + 3 + 4 + 5 + 6 + 7) + 21) << "every row's window";
    // A key cache of another width than q's heads, and a sliding window, are refused.
    EXPECT_THROW(be.dsa_indexer_paged(f32("q", T, H * D, q), f32("w", T, H, w), f32("c8", 8, 8, randn(64)), meta, H,
                                      scores),
                 std::invalid_argument);
    AttentionMeta windowed = meta;
    windowed.window = 4;
    EXPECT_THROW(be.dsa_indexer_paged(f32("q", T, H * D, q), f32("w", T, H, w),
                                      f32("cache", num_blocks * bs, D, cache), windowed, H, scores),
                 std::invalid_argument);
}

// Rounded scores make ties; the windows are the causal ones of the step (with the padded row's empty one).
TEST_F(DsaPaged, TopkCausalEqualsTopkWithTheHostsWindows) {
    const int64_t topk = 5;
    std::vector<float> sv = randn(T * max_keys);
    for (float& x : sv) x = std::round(x * 2.0f);
    dsa::TopkCase c{T, max_keys, topk, sv, std::vector<int64_t>(T, 0), std::vector<int64_t>(T)};
    for (int t = 0; t < T; ++t) c.window_end[t] = window_end(t);
    const Tensor scores = f32("scores", T, max_keys, sv);
    const DsaTopkWorkspace ws = dsa::make_topk_workspace(be, T, max_keys);
    const Tensor causal = i64("causal", T, topk, std::vector<int64_t>(T * topk, -7));
    const Tensor windowed = i64("windowed", T, topk, std::vector<int64_t>(T * topk, -7));
    be.dsa_topk_causal(scores, meta, ws, causal);
    be.dsa_topk(scores, i64("start", T, 1, c.window_start), i64("end", T, 1, c.window_end), ws, windowed);
    const std::vector<int64_t> got = get<int64_t>(causal);
    EXPECT_EQ(got, get<int64_t>(windowed));
    EXPECT_EQ(got, dsa::topk_causal_reference(c, qsl, seq_lens));
    EXPECT_EQ(got, dsa::topk_reference(c));
    for (int j = 0; j < topk; ++j) EXPECT_EQ(got[(T - 1) * topk + j], -1) << "the padded row selects nothing";
    // A metadata tensor of the wrong type, and a sliding window, are refused.
    AttentionMeta bad = meta;
    bad.seq_lens = i64("lens64", 1, S, {11, 7, 21});
    EXPECT_THROW(be.dsa_topk_causal(scores, bad, ws, causal), std::invalid_argument);
    AttentionMeta sliding = meta;
    sliding.window = 4;
    EXPECT_THROW(be.dsa_topk_causal(scores, sliding, ws, causal), std::invalid_argument);
}

// Layer 0's indexer scores of each golden prompt, as one prefill (every row of one sequence) and as the last row
// alone (a decode step), select the golden positions: including prompt 3's row 11, where positions 2 and 11 tie
// at 0.0 and the lower one is selected. Each row's scores beyond its window are +inf, which must not matter.
TEST_F(DsaPaged, TopkCausalSelectsTheGoldenPositions) {
    const auto goldens =
        nlohmann::json::parse(testing::read_text("testdata/models/tiny-deepseek-v32/reference_goldens.json"));
    const auto& sparse = goldens.at("sparse");
    const int64_t topk = sparse.at("index_topk").get<int64_t>();
    int prompts = 0;
    for (const auto& p : sparse.at("prompts")) {
        const auto& inter = p.at("intermediates");
        ASSERT_EQ(inter.at("layer").get<int>(), 0);
        const auto& rows = inter.at("indexer_scores");
        const int n = static_cast<int>(rows.size());
        SCOPED_TRACE(::testing::Message() << "prompt " << prompts << " of " << n << " tokens");
        std::vector<float> sv(static_cast<size_t>(n) * n, INFINITY);
        for (int t = 0; t < n; ++t) {
            ASSERT_EQ(static_cast<int>(rows[t].size()), t + 1);
            for (int s = 0; s <= t; ++s) sv[t * n + s] = static_cast<float>(rows[t][s].get<double>());
        }
        const int blocks = (n + bs - 1) / bs;
        std::vector<int32_t> bt(blocks);
        std::iota(bt.begin(), bt.end(), 0);
        const DsaTopkWorkspace ws = dsa::make_topk_workspace(be, n, n);
        const Tensor bt_t = i32("bt", 1, blocks, bt), lens = i32("lens", 1, 1, {n});
        const Tensor prefill = i64("prefill", n, topk, std::vector<int64_t>(n * topk));
        be.dsa_topk_causal(f32("scores", n, n, sv), AttentionMeta{bt_t, lens, i32("qsl", 1, 2, {0, n}), 1, bs}, ws,
                           prefill);
        const Tensor decode = i64("decode", 1, topk, std::vector<int64_t>(topk));
        be.dsa_topk_causal(f32("last", 1, n, std::vector<float>(sv.end() - n, sv.end())),
                           AttentionMeta{bt_t, lens, i32("qsl", 1, 2, {0, 1}), 1, bs}, ws, decode);
        const std::vector<int64_t> got = get<int64_t>(prefill), last = get<int64_t>(decode);
        for (int t = 0; t < n; ++t) {
            std::vector<int64_t> want = inter.at("selected")[t].get<std::vector<int64_t>>();
            want.resize(static_cast<size_t>(topk), -1);
            EXPECT_EQ(std::vector<int64_t>(got.begin() + t * topk, got.begin() + (t + 1) * topk), want) << "row " << t;
            if (t == n - 1) {
                EXPECT_EQ(last, want) << "the last row alone";
            }
        }
        ++prompts;
    }
    EXPECT_EQ(prompts, 4);
}

}  // namespace
}  // namespace tracelm
