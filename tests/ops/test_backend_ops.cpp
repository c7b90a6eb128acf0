// CPU backend ops against straightforward double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

class BackendOps : public testing::BackendTest {
   protected:
    BackendOps() : BackendTest(42) {}
};

// Weight-sized buffers start on a 2 MiB boundary (where transparent huge pages can back them) and are usable
// to their last byte; small ones are unaffected. Both are given back.
TEST(CpuMemory, LargeBuffersAreHugePageAligned) {
    cpu::CpuBackend be(1);
    constexpr size_t kHuge = size_t{2} << 20;
    for (const size_t bytes : {kHuge, 3 * kHuge + 4096 + 7}) {
        Buffer* b = be.alloc(bytes, "weights");
        EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % kHuge, 0u) << bytes;
        EXPECT_EQ(b->bytes, bytes);
        std::memset(b->data, 0x5a, bytes);
        EXPECT_EQ(static_cast<unsigned char*>(b->data)[bytes - 1], 0x5a);
        be.free(b);
    }
    Buffer* small = be.alloc(100, "norm");
    std::memset(small->data, 1, 100);
    be.free(small);
}

TEST_F(BackendOps, PagedAttentionMatchesDenseCausalAttention) {
    // Two sequences with different cached lengths, several new tokens each (a prefill chunk after
    // earlier context), GQA 4:2, blocks scattered over the pool in a non-monotonic order.
    const int H = 4, KV = 2, hd = 8, bs = 4, num_blocks = 16, max_blocks = 6;
    const std::vector<int> seq_lens = {11, 7}, q_lens = {3, 7};
    const std::vector<std::vector<int32_t>> tables = {{9, 2, 14}, {5, 0}};
    const int T = q_lens[0] + q_lens[1];
    const auto kc = randn(num_blocks * bs * KV * hd), vc = randn(num_blocks * bs * KV * hd), q = randn(T * H * hd);
    std::vector<int32_t> bt(2 * max_blocks, -1);
    for (int s = 0; s < 2; ++s)
        for (size_t b = 0; b < tables[s].size(); ++b) bt[s * max_blocks + b] = tables[s][b];

    AttentionMeta meta{i32("bt", 2, max_blocks, bt), i32("lens", 2, 1, {seq_lens[0], seq_lens[1]}),
                       i32("qsl", 3, 1, {0, q_lens[0], T}), 2, bs};
    const Tensor out = f32("out", T, H * hd, std::vector<float>(T * H * hd));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    be.attention(f32("q", T, H * hd, q), f32("kc", num_blocks * bs, KV * hd, kc), f32("vc", num_blocks * bs, KV * hd, vc),
                 meta, H, KV, hd, scale, out);
    const auto got = get<float>(out);

    int t = 0;
    for (int s = 0; s < 2; ++s) {
        for (int i = 0; i < q_lens[s]; ++i, ++t) {
            const int visible = seq_lens[s] - q_lens[s] + i + 1;
            for (int h = 0; h < H; ++h) {
                const int kvh = h / (H / KV);
                std::vector<double> scores(visible);
                double mx = -1e300;
                for (int j = 0; j < visible; ++j) {
                    const int slot = tables[s][j / bs] * bs + j % bs;
                    double d = 0;
                    for (int e = 0; e < hd; ++e) d += double(q[(t * H + h) * hd + e]) * kc[(slot * KV + kvh) * hd + e];
                    scores[j] = d * scale;
                    mx = std::max(mx, scores[j]);
                }
                double den = 0;
                for (auto& sc : scores) den += (sc = std::exp(sc - mx));
                for (int e = 0; e < hd; ++e) {
                    double o = 0;
                    for (int j = 0; j < visible; ++j) {
                        const int slot = tables[s][j / bs] * bs + j % bs;
                        o += scores[j] / den * vc[(slot * KV + kvh) * hd + e];
                    }
                    EXPECT_NEAR(got[(t * H + h) * hd + e], o, 1e-5) << "t=" << t << " h=" << h << " e=" << e;
                }
            }
        }
    }
}

// An f16 cache (llama.cpp's attention numbers) against double-precision attention over the same f16 values: two
// decode rows (one dot order) and a prefill chunk (the other), GQA 6:2, head_dim 64; the first sequence has an
// unassigned block inside what it may see (those positions are skipped) and the third has no blocks at all
// (zeros out).
TEST_F(BackendOps, PagedAttentionF16SkipsUnassignedBlocksAndMatchesDenseAttention) {
    const int H = 6, KV = 2, hd = 64, bs = 4, num_blocks = 24, max_blocks = 8;
    const std::vector<int> seq_lens = {29, 13, 5}, q_lens = {1, 4, 1};
    const std::vector<std::vector<int32_t>> tables = {{3, 17, -1, 8, 21, 0, 11, 6}, {9, 2, 14, 5}, {}};
    const int S = 3, T = 6;
    std::vector<uint16_t> kc16(num_blocks * bs * KV * hd), vc16(kc16.size());
    const auto kf = randn(kc16.size()), vf = randn(vc16.size()), q = randn(T * H * hd);
    for (size_t i = 0; i < kc16.size(); ++i) {
        kc16[i] = f32_to_f16(kf[i]);
        vc16[i] = f32_to_f16(vf[i]);
    }
    std::vector<int32_t> bt(S * max_blocks, -1);
    for (int s = 0; s < S; ++s)
        for (size_t b = 0; b < tables[s].size(); ++b) bt[s * max_blocks + b] = tables[s][b];
    AttentionMeta meta{i32("bt", S, max_blocks, bt), i32("lens", 1, S, {seq_lens[0], seq_lens[1], seq_lens[2]}),
                       i32("qsl", 1, S + 1, {0, 1, 5, 6}), S, bs};
    const Tensor out = f32("out", T, H * hd, std::vector<float>(T * H * hd, 7.0f));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    be.attention(f32("q", T, H * hd, q), make("kc", DType::F16, num_blocks * bs, KV * hd, kc16),
                 make("vc", DType::F16, num_blocks * bs, KV * hd, vc16), meta, H, KV, hd, scale, out);
    const auto got = get<float>(out);

    int t = 0;
    for (int s = 0; s < S; ++s) {
        for (int i = 0; i < q_lens[s]; ++i, ++t) {
            const int visible = seq_lens[s] - q_lens[s] + i + 1;
            for (int h = 0; h < H; ++h) {
                const int kvh = h / (H / KV);
                std::vector<int> slots;
                for (int j = 0; j < visible; ++j) {
                    const int block = j / bs < static_cast<int>(tables[s].size()) ? tables[s][j / bs] : -1;
                    if (block >= 0) slots.push_back(block * bs + j % bs);
                }
                std::vector<double> p;
                double mx = -1e300;
                for (const int slot : slots) {
                    double d = 0;
                    for (int e = 0; e < hd; ++e)
                        d += double(q[(t * H + h) * hd + e]) * f16_to_f32(kc16[(slot * KV + kvh) * hd + e]);
                    p.push_back(d * scale);
                    mx = std::max(mx, p.back());
                }
                double den = 0;
                for (double& v : p) den += (v = std::exp(v - mx));
                for (int e = 0; e < hd; ++e) {
                    double o = 0;
                    for (size_t j = 0; j < slots.size(); ++j)
                        o += p[j] / den * f16_to_f32(vc16[(slots[j] * KV + kvh) * hd + e]);
                    // q and the probabilities are rounded to f16 on the way, as llama.cpp does.
                    EXPECT_NEAR(got[(t * H + h) * hd + e], o, 4e-3) << "t=" << t << " h=" << h << " e=" << e;
                }
            }
        }
    }
}

TEST_F(BackendOps, RopeNeoxRotatesHalves) {
    const int heads = 2, hd = 8, T = 3;
    const float theta = 10000.0f;
    const std::vector<int32_t> pos = {0, 5, 1000};
    // Without scaling, then with factors dividing each pair's frequency (as Llama 3.1's rope_freqs do).
    const std::vector<float> factors = {1.0f, 2.5f, 8.0f, 0.5f};
    for (const bool scaled : {false, true}) {
        SCOPED_TRACE(scaled ? "scaled" : "plain");
        const auto x = randn(T * heads * hd);
        const Tensor xt = f32("x", T, heads * hd, x);
        be.rope_neox(xt, i32("pos", T, 1, pos), heads, hd,
                     RopeSpec{theta, scaled ? std::span<const float>(factors) : std::span<const float>()});
        const auto got = get<float>(xt);
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < heads; ++h)
                for (int i = 0; i < hd / 2; ++i) {
                    const double ang = pos[t] * std::pow(double(theta), -2.0 * i / hd) / (scaled ? factors[i] : 1.0);
                    const size_t b = (t * heads + h) * hd;
                    const double x1 = x[b + i], x2 = x[b + i + hd / 2];
                    EXPECT_NEAR(got[b + i], x1 * std::cos(ang) - x2 * std::sin(ang), 2e-4);
                    EXPECT_NEAR(got[b + i + hd / 2], x2 * std::cos(ang) + x1 * std::sin(ang), 2e-4);
                }
    }
}

TEST_F(BackendOps, ArgmaxLowestIndexWinsAndNanNeverWins) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> l = {1, 3, 3, 2,  nan, -1, nan, -2,  -inf, -inf, -inf, -inf,  nan, nan, nan, nan,
                                  0, -0.0f, 5, 5};
    const Tensor ids = i32("ids", 5, 1, std::vector<int32_t>(5, -7));
    be.argmax(f32("logits", 5, 4, l), ids);
    EXPECT_EQ(get<int32_t>(ids), (std::vector<int32_t>{1, 1, 0, 0, 2}));
}

TEST_F(BackendOps, KvWriteSkipsNegativeSlotsAndEmbeddingZeroesInvalidIds) {
    const auto k = randn(3 * 4), v = randn(3 * 4);
    const Tensor kc = f32("kc", 8, 4, std::vector<float>(32, 9.0f)), vc = f32("vc", 8, 4, std::vector<float>(32, 9.0f));
    be.kv_write(f32("k", 3, 4, k), f32("v", 3, 4, v), i32("slots", 3, 1, {6, -1, 1}), kc, vc);
    const auto gk = get<float>(kc), gv = get<float>(vc);
    for (int e = 0; e < 4; ++e) {
        EXPECT_EQ(gk[6 * 4 + e], k[e]);
        EXPECT_EQ(gv[1 * 4 + e], v[2 * 4 + e]);
    }
    EXPECT_EQ(std::count(gk.begin(), gk.end(), 9.0f), 32 - 8);

    const auto table = randn(5 * 3);
    const Tensor out = f32("emb", 3, 3, std::vector<float>(9, 1.0f));
    be.embedding(i32("ids", 3, 1, {4, -1, 5}), f32("table", 5, 3, table), out);
    const auto g = get<float>(out);
    EXPECT_EQ(std::vector<float>(g.begin(), g.begin() + 3), std::vector<float>(table.begin() + 12, table.end()));
    EXPECT_EQ(std::vector<float>(g.begin() + 3, g.end()), std::vector<float>(6, 0.0f));
}

TEST_F(BackendOps, AdvanceDecodeFeedsSampledIdsAndWalksTheBlockTable) {
    // Two sequences, block size 4: sequence 0 sits at the end of its first block.
    DecodeState st;
    st.token_ids = i32("tok", 2, 1, {0, 0});
    st.positions = i32("pos", 2, 1, {3, 9});
    st.slot_mapping = i32("slot", 2, 1, {7 * 4 + 3, 0});
    st.seq_lens = i32("lens", 2, 1, {4, 10});
    st.block_tables = i32("bt", 2, 3, {7, 2, -1, 1, 5, 6});
    st.step = i32("step", 1, 1, {0});
    st.history = i32("hist", 4, 2, std::vector<int32_t>(8, -1));
    st.block_size = 4;
    be.advance_decode(i32("sampled", 2, 1, {11, 22}), st);
    EXPECT_EQ(get<int32_t>(st.token_ids), (std::vector<int32_t>{11, 22}));
    EXPECT_EQ(get<int32_t>(st.positions), (std::vector<int32_t>{4, 10}));
    EXPECT_EQ(get<int32_t>(st.seq_lens), (std::vector<int32_t>{5, 11}));
    EXPECT_EQ(get<int32_t>(st.slot_mapping), (std::vector<int32_t>{2 * 4 + 0, 6 * 4 + 2}));
    EXPECT_EQ(get<int32_t>(st.step), (std::vector<int32_t>{1}));
    be.advance_decode(i32("sampled2", 2, 1, {33, 44}), st);
    EXPECT_EQ(get<int32_t>(st.history), (std::vector<int32_t>{11, 22, 33, 44, -1, -1, -1, -1}));
    // Past the last reserved block the slot becomes -1 (the KV write then skips it).
    for (int i = 0; i < 2; ++i) be.advance_decode(i32("sampled_more", 2, 1, {1, 1}), st);
    EXPECT_EQ(get<int32_t>(st.slot_mapping)[1], -1);
}

}  // namespace
}  // namespace tracelm
