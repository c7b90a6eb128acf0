// The decode_state family: argmax, advance_decode and kv_slots, the ops that pick a token and feed it into the next step on
// the device. Their interface and contract are in runtime/backend.h; decode_state.cpp checks their arguments (the
// entry points every backend goes through), and this header declares the references the backends are tested against
// (tests/ops/test_decode_state.cpp), plain loops on host arrays.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tracelm::reference {

// Per row of `cols` logits, the index of the largest; the lowest index wins ties, NaN never wins (a row of NaN: 0).
std::vector<int32_t> argmax(std::span<const float> logits, int64_t cols);

// DecodeState on the host (one entry per sequence unless said otherwise).
struct HostDecodeState {
    std::vector<int32_t> token_ids, positions, slot_mapping, seq_lens;
    std::vector<int32_t> block_tables;  // [S, max_blocks]
    int32_t step = 0;
    std::vector<int32_t> history;       // [rows, S]
    int block_size = 0;
};

// history[step] = sampled (when that row exists), token_ids = sampled, positions and seq_lens + 1, the slot of the
// new position from the block table (-1 where its block is unassigned or past the table), step + 1.
void advance_decode(std::span<const int32_t> sampled, HostDecodeState& st);

// The slot of positions[s] in row s of block_tables ([S, max_blocks]): block * block_size + position % block_size,
// -1 where the block is unassigned (negative) or past the table.
std::vector<int32_t> kv_slots(std::span<const int32_t> positions, std::span<const int32_t> block_tables,
                              int block_size);

}  // namespace tracelm::reference
