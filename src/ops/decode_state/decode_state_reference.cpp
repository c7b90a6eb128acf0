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
        const int32_t pos = ++st.positions[s];
        ++st.seq_lens[s];
        const size_t b = static_cast<size_t>(pos / st.block_size);
        const int32_t block = b < max_blocks ? st.block_tables[s * max_blocks + b] : -1;
        st.slot_mapping[s] = block < 0 ? -1 : block * st.block_size + pos % st.block_size;
    }
    ++st.step;
}

}  // namespace tracelm::reference
