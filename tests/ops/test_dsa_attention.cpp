// The DSA indexer score and sparse decode attention on the CPU backend: against double-precision references,
// against dense paged attention, and as one captured decode step (indexer -> top-k -> sparse attention).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "ops/attention/attention.h"
#include "ops/dsa/dsa_indexer.h"
#include "ops/dsa/dsa_topk.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

class DsaAttention : public testing::BackendTest {
   protected:
    DsaAttention() : BackendTest(3) {}
};

TEST_F(DsaAttention, IndexerScoreMatchesDoubleReference) {
    const int T = 3, H = 4, D = 16, nk = 37;
    const auto q = randn(T * H * D), w = randn(T * H), k = randn(nk * D);
    const Tensor out = f32("scores", T, nk, std::vector<float>(T * nk));
    be.dsa_indexer(f32("q", T, H * D, q), f32("w", T, H, w), f32("k", nk, D, k), H, out);
    const auto got = get<float>(out);
    const std::vector<double> want = reference::dsa_indexer(q, w, k, H, D);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
    EXPECT_THROW(be.dsa_indexer(f32("q2", T, H * D, q), f32("w2", T, H, w), f32("k2", nk, D, k), H - 1, out),
                 std::invalid_argument);
}

// Two sequences with new tokens after earlier context (a prefill chunk, so rows see different prefixes),
// GQA 4:2, blocks scattered over the pool.
class SparseAttention : public DsaAttention {
   protected:
    static constexpr int H = 4, KV = 2, hd = 8, bs = 4, num_blocks = 16, max_blocks = 6;
    const std::vector<int> seq_lens = {11, 7}, q_lens = {3, 7};
    const std::vector<std::vector<int32_t>> tables = {{9, 2, 14}, {5, 0}};
    const int T = 10;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> q = randn(T * H * hd), kc = randn(num_blocks * bs * KV * hd),
                       vc = randn(num_blocks * bs * KV * hd);
    Tensor qt, kct, vct;
    AttentionMeta meta;

    reference::PagedAttentionMeta host_meta() const {
        reference::PagedAttentionMeta m{std::vector<int32_t>(2 * max_blocks, -1), max_blocks, seq_lens,
                                        {0, q_lens[0], T}, bs};
        for (int s = 0; s < 2; ++s) std::copy(tables[s].begin(), tables[s].end(), m.block_tables.begin() + s * max_blocks);
        return m;
    }

    void SetUp() override {
        std::vector<int32_t> bt(2 * max_blocks, -1);
        for (int s = 0; s < 2; ++s)
            for (size_t b = 0; b < tables[s].size(); ++b) bt[s * max_blocks + b] = tables[s][b];
        meta = AttentionMeta{i32("bt", 2, max_blocks, bt), i32("lens", 2, 1, {seq_lens[0], seq_lens[1]}),
                             i32("qsl", 3, 1, {0, q_lens[0], T}), 2, bs};
        qt = f32("q", T, H * hd, q);
        kct = f32("kc", num_blocks * bs, KV * hd, kc);
        vct = f32("vc", num_blocks * bs, KV * hd, vc);
    }
    int seq_of(int t) const { return t < q_lens[0] ? 0 : 1; }
    int visible(int t) const {
        const int s = seq_of(t), i = s == 0 ? t : t - q_lens[0];
        return seq_lens[s] - q_lens[s] + i + 1;
    }
    std::vector<float> sparse(const std::vector<int64_t>& indices, int64_t topk) {
        const Tensor out = f32("out", T, H * hd, std::vector<float>(T * H * hd, 7.0f));
        be.sparse_attention(qt, kct, vct, meta, i64("idx", T, topk, indices), H, KV, hd, scale, out);
        return get<float>(out);
    }
};

TEST_F(SparseAttention, AllKeysSelectedEqualsDenseAttentionExactly) {
    // Every row lists all its sequence's cached positions in ascending order, then padding; positions a
    // prefill row may not see yet are skipped, so each row attends to exactly what attention() does, in the
    // same order, and the results agree bit for bit.
    const int64_t topk = 13;
    std::vector<int64_t> indices(T * topk, -1);
    for (int t = 0; t < T; ++t) {
        std::iota(indices.begin() + t * topk, indices.begin() + t * topk + seq_lens[seq_of(t)], 0);
    }
    const Tensor dense = f32("dense", T, H * hd, std::vector<float>(T * H * hd));
    be.attention(qt, kct, vct, meta, H, KV, hd, scale, dense);
    const auto want = get<float>(dense);
    const auto got = sparse(indices, topk);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

TEST_F(SparseAttention, SelectionEqualsMaskedDenseAttention) {
    // Random subsets in random order with -1 padding mixed in, plus positions beyond what a row may see (which
    // must be skipped); row 4 selects nothing it may see and gets zeros.
    const int64_t topk = 9;
    std::vector<int64_t> indices(T * topk, -1);
    std::vector<std::vector<int>> attended(T);
    for (int t = 0; t < T; ++t) {
        std::vector<int64_t> row;
        for (int j = 0; j < visible(t); ++j) {
            if (t != 4 && rng() % 2 == 0) {
                row.push_back(j);
                attended[t].push_back(j);
            }
        }
        row.resize(std::min<size_t>(row.size(), topk - 3));
        attended[t].resize(row.size());
        row.push_back(-1);
        row.push_back(visible(t));  // just out of the row's view
        row.push_back(1000);
        std::shuffle(row.begin(), row.end(), rng);
        std::copy(row.begin(), row.end(), indices.begin() + t * topk);
    }
    const auto got = sparse(indices, topk);
    std::vector<std::vector<int64_t>> selected(T);
    for (int t = 0; t < T; ++t) selected[t].assign(attended[t].begin(), attended[t].end());
    const std::vector<double> want = reference::attention_over(q, kc, vc, host_meta(), H, KV, hd, scale, selected);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST_F(DsaAttention, CapturedDecodeStepReplaysEagerWithoutAllocating) {
    // One sequence of 300 cached tokens, the last 2 new: indexer scores over all 300 keys, top-64 within each
    // row's causal window, sparse attention over those positions of the paged cache.
    const int L = 300, Tq = 2, H = 4, KV = 2, hd = 16, bs = 16, blocks = 24, topk = 64;
    const int Hi = 2, Di = 32;
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const AttentionMeta meta{i32("bt", 1, blocks, table), i32("lens", 1, 1, {L}), i32("qsl", 2, 1, {0, Tq}), 1, bs};
    const Tensor q = f32("q", Tq, H * hd, randn(Tq * H * hd));
    const Tensor kc = f32("kc", blocks * bs, KV * hd, randn(blocks * bs * KV * hd));
    const Tensor vc = f32("vc", blocks * bs, KV * hd, randn(blocks * bs * KV * hd));
    const Tensor qi = f32("qi", Tq, Hi * Di, randn(Tq * Hi * Di));
    const Tensor wi = f32("wi", Tq, Hi, randn(Tq * Hi));
    const Tensor ki = f32("ki", L, Di, randn(L * Di));
    const Tensor scores = f32("scores", Tq, L, std::vector<float>(Tq * L));
    const Tensor start = i64("start", Tq, 1, {0, 0});
    const Tensor end = i64("end", Tq, 1, {L - 1, L});
    const Tensor indices = i64("indices", Tq, topk, std::vector<int64_t>(Tq * topk));
    const Tensor out = f32("out", Tq, H * hd, std::vector<float>(Tq * H * hd));
    const DsaTopkWorkspace ws = dsa::make_topk_workspace(be, Tq, L);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    auto step = [&] {
        be.dsa_indexer(qi, wi, ki, Hi, scores);
        be.dsa_topk(scores, start, end, ws, indices);
        be.sparse_attention(q, kc, vc, meta, indices, H, KV, hd, scale, out);
    };

    step();
    const auto eager = get<float>(out);
    const auto eager_indices = get<int64_t>(indices);
    for (int t = 0; t < Tq; ++t) {
        for (int j = 0; j < topk; ++j) {
            const int64_t pos = eager_indices[t * topk + j];
            EXPECT_TRUE(pos >= 0 && pos < L - 1 + t) << "t=" << t << " j=" << j << " pos=" << pos;
        }
    }

    be.begin_capture();
    step();
    const GraphId g = be.end_capture();
    EXPECT_EQ(be.graph_nodes(g), 3u);
    be.upload(out, std::vector<float>(Tq * H * hd, 0.0f).data());
    const uint64_t before = testing::heap_allocations().load();
    be.replay(g);
    EXPECT_EQ(testing::heap_allocations().load() - before, 0u);
    const auto replayed = get<float>(out);
    EXPECT_EQ(0, std::memcmp(replayed.data(), eager.data(), eager.size() * sizeof(float)));
}

}  // namespace
}  // namespace tracelm
