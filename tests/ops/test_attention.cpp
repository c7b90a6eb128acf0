// The attention family (kv_write and paged attention): every backend against the CPU backend
// (support/op_conformance.h), and the CPU backend against the references of src/ops/attention (llama.cpp's own
// f16 attention numbers are checked in tests/backends/test_ggml_conformance.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ops/attention/attention.h"
#include "support/op_conformance.h"
#include "support/reference_check.h"

namespace tracelm {
namespace {

using namespace conformance;

std::vector<OpCase> kv_write_cases(std::mt19937& rng) {
    return {{"kv_write",
             {f32("k", 4, 24, randn(rng, 96)), f32("v", 4, 24, randn(rng, 96)), i32("slots", 1, 4, {3, -1, 10, 16}),
              f32("kc", 16, 24, randn(rng, 16 * 24)), f32("vc", 16, 24, randn(rng, 16 * 24))},
             {3, 4},
             0.0,
             [](Backend& be, const Bound& b) { be.kv_write(b.t[0], b.t[1], b.t[2], b.t[3], b.t[4]); }}};
}

TEST_P(OpConformance, KvWriteMatchesTheCpuReference) { check(kv_write_cases(rng_)); }
TEST_P(OpConformance, AttentionMatchesTheCpuReference) { check(attention_cases(rng_, false)); }


// ---- the CPU backend against the references of src/ops/attention ----

class AttentionReference : public testing::OpReferenceTest {
   protected:
    // The device metadata of a host one.
    AttentionMeta device_meta(const reference::PagedAttentionMeta& m) {
        const int S = static_cast<int>(m.seq_lens.size());
        AttentionMeta meta{i32("bt", S, m.max_blocks, m.block_tables), i32("lens", 1, S, m.seq_lens),
                           i32("qsl", 1, S + 1, m.query_start_loc), S, m.block_size};
        meta.window = m.window;
        return meta;
    }
};

TEST_F(AttentionReference, KvWriteSkipsSlotsOutsideTheCache) {
    const auto k = randn(4 * 6), v = randn(4 * 6);
    const std::vector<int32_t> slots = {6, -1, 1, 8};
    std::vector<float> kc(8 * 6, 9.0f), vc(8 * 6, 9.0f);
    const Tensor kct = f32("kc", 8, 6, kc), vct = f32("vc", 8, 6, vc);
    be.kv_write(f32("k", 4, 6, k), f32("v", 4, 6, v), i32("slots", 4, 1, slots), kct, vct);
    reference::kv_write(k, v, slots, 6, kc, vc);
    EXPECT_EQ(get<float>(kct), kc);
    EXPECT_EQ(get<float>(vct), vc);
    EXPECT_EQ(std::count(kc.begin(), kc.end(), 9.0f), 8 * 6 - 2 * 6);  // the reference, by hand: two rows written
}

TEST_F(AttentionReference, PagedAttentionMatchesDenseCausalAttention) {
    // Two sequences with different cached lengths, several new tokens each (a prefill chunk after earlier context),
    // GQA 4:2, blocks scattered over the pool in a non-monotonic order.
    const int H = 4, KV = 2, hd = 8, bs = 4, num_blocks = 16;
    const reference::PagedAttentionMeta meta{{9, 2, 14, -1, -1, -1, 5, 0, -1, -1, -1, -1}, 6, {11, 7}, {0, 3, 10}, bs};
    const int T = 10;
    const auto kc = randn(num_blocks * bs * KV * hd), vc = randn(num_blocks * bs * KV * hd), q = randn(T * H * hd);
    const Tensor out = f32("out", T, H * hd, std::vector<float>(T * H * hd));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    be.attention(f32("q", T, H * hd, q), f32("kc", num_blocks * bs, KV * hd, kc), f32("vc", num_blocks * bs, KV * hd, vc),
                 device_meta(meta), H, KV, hd, scale, out);
    expect_close(get<float>(out), reference::attention(q, kc, vc, meta, H, KV, hd, scale), 1e-5, "attention");
}

// An f16 cache (llama.cpp's attention numbers) against double-precision attention over the same f16 values: two
// decode rows (one dot order) and a prefill chunk (the other), GQA 6:2, head_dim 64; the first sequence has an
// unassigned block inside what it may see (those positions are skipped) and the third has no blocks at all
// (zeros out).
TEST_F(AttentionReference, PagedAttentionF16SkipsUnassignedBlocksAndMatchesDenseAttention) {
    const int H = 6, KV = 2, hd = 64, bs = 4, num_blocks = 24, max_blocks = 8, T = 6;
    const std::vector<std::vector<int32_t>> tables = {{3, 17, -1, 8, 21, 0, 11, 6}, {9, 2, 14, 5}, {}};
    reference::PagedAttentionMeta meta{std::vector<int32_t>(3 * max_blocks, -1), max_blocks, {29, 13, 5}, {0, 1, 5, 6}, bs};
    for (size_t s = 0; s < tables.size(); ++s) std::copy(tables[s].begin(), tables[s].end(), meta.block_tables.begin() + s * max_blocks);
    std::vector<uint16_t> kc16(num_blocks * bs * KV * hd), vc16(kc16.size());
    std::vector<float> kc(kc16.size()), vc(kc16.size());
    const auto kf = randn(kc16.size()), vf = randn(vc16.size()), q = randn(T * H * hd);
    for (size_t i = 0; i < kc16.size(); ++i) {
        kc16[i] = f32_to_f16(kf[i]);
        vc16[i] = f32_to_f16(vf[i]);
        kc[i] = f16_to_f32(kc16[i]);
        vc[i] = f16_to_f32(vc16[i]);
    }
    const Tensor out = f32("out", T, H * hd, std::vector<float>(T * H * hd, 7.0f));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    be.attention(f32("q", T, H * hd, q), make("kc", DType::F16, num_blocks * bs, KV * hd, kc16),
                 make("vc", DType::F16, num_blocks * bs, KV * hd, vc16), device_meta(meta), H, KV, hd, scale, out);
    const std::vector<float> got = get<float>(out);
    // q and the probabilities are rounded to f16 on the way, as llama.cpp does.
    expect_close(got, reference::attention(q, kc, vc, meta, H, KV, hd, scale), 4e-3, "f16 attention");
    EXPECT_EQ(std::vector<float>(got.end() - H * hd, got.end()), std::vector<float>(H * hd, 0.0f));
}

// Sliding windows (Gemma's local layers): a long sequence's prefill chunk (tiles of several query rows, each with
// its own window start), a decode row, and a short sequence inside its window, on f32 and f16 caches, for windows
// that are and are not multiples of the block size and of the kernels' 32 lanes, and one wider than the context.
TEST_F(AttentionReference, SlidingWindowAttentionSeesOnlyTheLastWindowPositions) {
    const int H = 4, KV = 1, hd = 64, bs = 16, max_blocks = 12, num_blocks = 3 * max_blocks, T = 20 + 1 + 9;
    reference::PagedAttentionMeta meta{std::vector<int32_t>(3 * max_blocks, -1), max_blocks, {170, 133, 9},
                                       {0, 20, 21, T}, bs};
    std::vector<int32_t> pool(num_blocks);
    for (int i = 0; i < num_blocks; ++i) pool[i] = (i * 7) % num_blocks;  // scattered, each block once
    for (int s = 0, next = 0; s < 3; ++s)
        for (int b = 0; b < (meta.seq_lens[s] + bs - 1) / bs; ++b) meta.block_tables[s * max_blocks + b] = pool[next++];
    const int64_t slots = int64_t{num_blocks} * bs;
    const auto kf = randn(slots * KV * hd), vf = randn(slots * KV * hd), q = randn(T * H * hd);
    std::vector<uint16_t> kc16(kf.size()), vc16(vf.size());
    std::vector<float> kc(kf.size()), vc(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) {
        kc16[i] = f32_to_f16(kf[i]);
        vc16[i] = f32_to_f16(vf[i]);
        kc[i] = f16_to_f32(kc16[i]);
        vc[i] = f16_to_f32(vc16[i]);
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (const int window : {37, 64, 500}) {
        meta.window = window;
        const std::vector<double> want = reference::attention(q, kc, vc, meta, H, KV, hd, scale);
        for (const bool f16 : {false, true}) {
            SCOPED_TRACE("window " + std::to_string(window) + (f16 ? " f16" : " f32"));
            const Tensor out = f32("out", T, H * hd, std::vector<float>(T * H * hd, 7.0f));
            const Tensor k = f16 ? make("kc", DType::F16, slots, KV * hd, kc16) : f32("kc", slots, KV * hd, kc);
            const Tensor v = f16 ? make("vc", DType::F16, slots, KV * hd, vc16) : f32("vc", slots, KV * hd, vc);
            be.attention(f32("q", T, H * hd, q), k, v, device_meta(meta), H, KV, hd, scale, out);
            expect_close(get<float>(out), want, f16 ? 4e-3 : 1e-5, "windowed attention");
        }
    }
    // The reference itself: a window wider than every sequence changes nothing, a narrow one changes the rows whose
    // sequence is longer than it.
    meta.window = 500;
    const std::vector<double> wide = reference::attention(q, kc, vc, meta, H, KV, hd, scale);
    meta.window = 0;
    EXPECT_EQ(reference::attention(q, kc, vc, meta, H, KV, hd, scale), wide);
    meta.window = 37;
    const std::vector<double> narrow = reference::attention(q, kc, vc, meta, H, KV, hd, scale);
    EXPECT_NE(std::vector<double>(narrow.begin(), narrow.begin() + 21 * H * hd),
              std::vector<double>(wide.begin(), wide.begin() + 21 * H * hd));
    EXPECT_EQ(std::vector<double>(narrow.begin() + 21 * H * hd, narrow.end()),
              std::vector<double>(wide.begin() + 21 * H * hd, wide.end()));
}

}  // namespace
}  // namespace tracelm
