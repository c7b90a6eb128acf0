#include <cmath>
#include <stdexcept>

#include "ops/decode_state/decode_state.h"

namespace tracelm::reference {

std::vector<int32_t> argmax(std::span<const float> logits, int64_t cols) {
    std::vector<int32_t> ids(logits.size() / cols, 0);
    for (size_t r = 0; r < ids.size(); ++r) {
        int64_t best = -1;
        for (int64_t c = 0; c < cols; ++c) {
            const float x = logits[r * cols + c];
            if (!std::isnan(x) && (best < 0 || x > logits[r * cols + best])) best = c;
        }
        ids[r] = static_cast<int32_t>(best < 0 ? 0 : best);
    }
    return ids;
}

void advance_decode(std::span<const int32_t> sampled, HostDecodeState& st) {
    const size_t S = sampled.size();
    if (st.token_ids.size() != S || st.positions.size() != S || st.slot_mapping.size() != S ||
        st.seq_lens.size() != S || S == 0 || st.block_tables.size() % S != 0 || st.history.size() % S != 0)
        throw std::invalid_argument("reference::advance_decode: shape mismatch");
    const size_t max_blocks = st.block_tables.size() / S, history_rows = st.history.size() / S;
    for (size_t s = 0; s < S; ++s) {
        if (st.step >= 0 && static_cast<size_t>(st.step) < history_rows) st.history[st.step * S + s] = sampled[s];
        st.token_ids[s] = sampled[s];
        ++st.positions[s];
        ++st.seq_lens[s];
        st.slot_mapping[s] = kv_slots(std::span<const int32_t>(&st.positions[s], 1),
                                      std::span<const int32_t>(st.block_tables).subspan(s * max_blocks, max_blocks),
                                      st.block_size)[0];
    }
    ++st.step;
}

std::vector<int32_t> kv_slots(std::span<const int32_t> positions, std::span<const int32_t> block_tables,
                              int block_size) {
    const size_t S = positions.size();
    if (S == 0 || block_tables.size() % S != 0 || block_size <= 0)
        throw std::invalid_argument("reference::kv_slots: shape mismatch");
    const size_t max_blocks = block_tables.size() / S;
    std::vector<int32_t> out(S);
    for (size_t s = 0; s < S; ++s) {
        const int32_t pos = positions[s];
        const int64_t b = pos < 0 ? -1 : pos / block_size;
        const int32_t block = b >= 0 && static_cast<size_t>(b) < max_blocks ? block_tables[s * max_blocks + b] : -1;
        out[s] = block < 0 ? -1 : block * block_size + pos % block_size;
    }
    return out;
}

}  // namespace tracelm::reference
