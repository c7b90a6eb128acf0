// The decode_state family (argmax and advance_decode): every backend against the CPU backend
// (support/op_conformance.h), and the CPU backend against the references of src/ops/decode_state.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ops/decode_state/decode_state.h"
#include "support/op_conformance.h"
#include "support/reference_check.h"

namespace tracelm {
namespace {

using namespace conformance;

std::vector<OpCase> argmax_cases(std::mt19937& rng) {
    const int64_t V = 3001;
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::vector<float> l = randn(rng, 7 * V);
    auto row = [&](int r) { return l.begin() + r * V; };
    // Row 0: plain. Row 1: a tie between 10 and 2900 (10 wins). Row 2: NaN everywhere but one value.
    // Row 3: all NaN (0). Row 4: all -inf behind a NaN (index 1). Row 5: NaN at the front and the maximum last.
    // Row 6: +inf twice (the first wins).
    row(1)[10] = row(1)[2900] = 100.0f;
    std::fill(row(2), row(2) + V, nan);
    row(2)[1234] = -5.0f;
    std::fill(row(3), row(3) + V, nan);
    std::fill(row(4), row(4) + V, -inf);
    row(4)[0] = nan;
    row(5)[0] = nan;
    row(5)[V - 1] = 50.0f;
    row(6)[77] = row(6)[78] = inf;
    return {{"argmax", {f32("logits", 7, V, l), i32("ids", 1, 7, std::vector<int32_t>(7, -7))}, {1}, 0.0,
             [](Backend& be, const Bound& b) { be.argmax(b.t[0], b.t[1]); }}};
}

std::vector<OpCase> advance_cases() {
    // Three sequences, 4-token blocks, 3 blocks each: the first crosses into its next block, the second into an
    // unassigned block (slot -1), the third past the block table (slot -1).
    const std::vector<int32_t> tables = {5, 2, 9, 1, 7, -1, 3, 4, 8};
    return {{"advance_decode",
             {i32("sampled", 1, 3, {11, 22, 33}), i32("ids", 1, 3, {0, 0, 0}), i32("pos", 1, 3, {3, 7, 11}),
              i32("slots", 1, 3, {23, 19, 35}), i32("lens", 1, 3, {4, 8, 12}), i32("bt", 3, 3, tables),
              i32("step", 1, 1, {2}), i32("history", 5, 3, std::vector<int32_t>(15, -9))},
             {1, 2, 3, 4, 6, 7},
             0.0,
             [](Backend& be, const Bound& b) {
                 DecodeState st;
                 st.token_ids = b.t[1];
                 st.positions = b.t[2];
                 st.slot_mapping = b.t[3];
                 st.seq_lens = b.t[4];
                 st.block_tables = b.t[5];
                 st.step = b.t[6];
                 st.history = b.t[7];
                 st.block_size = 4;
                 be.advance_decode(b.t[0], st);
             }}};
}

std::vector<OpCase> kv_slots_cases() {
    // Four rows, 4-token blocks, 3 blocks each: inside an assigned block, in an unassigned one, past the table, and a
    // negative position (an inert row never has one, but the op must not read outside the table).
    return {{"kv_slots",
             {i32("pos", 1, 4, {5, 4, 12, -1}), i32("bt", 4, 3, {5, 2, 9, 1, -1, 3, 4, 8, 6, 7, 0, 2}),
              i32("slots", 1, 4, {-9, -9, -9, -9})},
             {2},
             0.0,
             [](Backend& be, const Bound& b) { be.kv_slots(b.t[0], b.t[1], 4, b.t[2]); }}};
}

TEST_P(OpConformance, ArgmaxMatchesTheCpuReference) { check(argmax_cases(rng_)); }
TEST_P(OpConformance, KvSlotsMatchTheCpuReference) { check(kv_slots_cases()); }
TEST_P(OpConformance, AdvanceDecodeMatchesTheCpuReference) { check(advance_cases()); }


// ---- the CPU backend against the references of src/ops/decode_state ----

using DecodeStateReference = testing::OpReferenceTest;

TEST_F(DecodeStateReference, ArgmaxLowestIndexWinsAndNanNeverWins) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> l = {1, 3, 3, 2,  nan, -1, nan, -2,  -inf, -inf, -inf, -inf,  nan, nan, nan, nan,
                                  0, -0.0f, 5, 5};
    const Tensor ids = i32("ids", 5, 1, std::vector<int32_t>(5, -7));
    be.argmax(f32("logits", 5, 4, l), ids);
    EXPECT_EQ(reference::argmax(l, 4), (std::vector<int32_t>{1, 1, 0, 0, 2}));  // the reference, by hand
    EXPECT_EQ(get<int32_t>(ids), reference::argmax(l, 4));
    const auto big = randn(3 * 5000);
    const Tensor big_ids = i32("big_ids", 3, 1, std::vector<int32_t>(3, -7));
    be.argmax(f32("big", 3, 5000, big), big_ids);
    EXPECT_EQ(get<int32_t>(big_ids), reference::argmax(big, 5000));
}

TEST_F(DecodeStateReference, AdvanceDecodeFeedsSampledIdsAndWalksTheBlockTable) {
    // Two sequences, block size 4: sequence 0 sits at the end of its first block; sequence 1 runs past its
    // reserved blocks (slot -1) on the third step; the history has rows for the first three steps only.
    reference::HostDecodeState want{{0, 0}, {3, 9}, {7 * 4 + 3, 0}, {4, 10}, {7, 2, -1, 1, 5, 6}, 0,
                                    std::vector<int32_t>(6, -1), 4};
    DecodeState st;
    st.token_ids = i32("tok", 2, 1, want.token_ids);
    st.positions = i32("pos", 2, 1, want.positions);
    st.slot_mapping = i32("slot", 2, 1, want.slot_mapping);
    st.seq_lens = i32("lens", 2, 1, want.seq_lens);
    st.block_tables = i32("bt", 2, 3, want.block_tables);
    st.step = i32("step", 1, 1, {0});
    st.history = i32("hist", 3, 2, want.history);
    st.block_size = 4;
    const std::vector<std::vector<int32_t>> draws = {{11, 22}, {33, 44}, {1, 2}, {3, 4}};
    for (const auto& sampled : draws) {
        be.advance_decode(i32("sampled", 2, 1, sampled), st);
        reference::advance_decode(sampled, want);
        EXPECT_EQ(get<int32_t>(st.token_ids), want.token_ids);
        EXPECT_EQ(get<int32_t>(st.positions), want.positions);
        EXPECT_EQ(get<int32_t>(st.seq_lens), want.seq_lens);
        EXPECT_EQ(get<int32_t>(st.slot_mapping), want.slot_mapping);
        EXPECT_EQ(get<int32_t>(st.step), std::vector<int32_t>{want.step});
        EXPECT_EQ(get<int32_t>(st.history), want.history);
    }
    // What the reference says, by hand: the new positions' slots, then -1 past the reserved blocks.
    EXPECT_EQ(want.history, (std::vector<int32_t>{11, 22, 33, 44, 1, 2}));
    EXPECT_EQ(want.slot_mapping[1], -1);
}

TEST_F(DecodeStateReference, KvSlotsWalkEachRowsBlockTable) {
    const std::vector<int32_t> pos = {5, 4, 12, -1, 0}, tables = {5, 2, 9, 1, -1, 3, 4, 8, 6, 7, 0, 2, 3, 3, 3};
    const Tensor slots = i32("slots", 1, 5, {-9, -9, -9, -9, -9});
    be.kv_slots(i32("pos", 1, 5, pos), i32("bt", 5, 3, tables), 4, slots);
    const std::vector<int32_t> want = reference::kv_slots(pos, tables, 4);
    EXPECT_EQ(get<int32_t>(slots), want);
    // By hand: block 1 of row 0 is 2 (slot 2*4 + 1); row 1's block 1 is unassigned; row 2 is past its table; a
    // negative position has no slot; row 4's position 0 is block 3's first slot.
    EXPECT_EQ(want, (std::vector<int32_t>{9, -1, -1, -1, 12}));
}

}  // namespace
}  // namespace tracelm
