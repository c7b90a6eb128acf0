// Mixed steps (engine.h): the decode step of every decoding row and a prompt piece in one forward, so that the piece
// shares the step's pass over the weights (Sarathi-Serve's and vLLM V1's chunked prefill). The forward runs over the
// decoding rows only, gathered in order (their inputs copied on the device from the decode state, as the decode step
// reads them), followed by the piece's rows, as decoding rows + 1 sequences: every op computes a row from its own
// sequence (attention by its own block table and query count, the last layer from each sequence's last row), and the
// products give a row the same bits whatever rows share them where can_mix() holds. The bucket's inert rows (free, or
// admitted and still prefilling: under steady load a third of a bucket) are left out of the forward, where a decode
// step computes them whole. Then the decode rows' logits go back to their rows, the rows sample and advance as a
// decode step does, and the piece's row completes as prefill() completes it, after the step (its first decode step is
// the next).
#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "engine/engine.h"

namespace tracelm {

bool Engine::can_mix() const { return !tiled_weights_ && !whole_forwards_; }

bool Engine::mixable(int row) const {
    const Row& r = rows_.at(static_cast<size_t>(row));
    return r.admitted && !r.decoding && r.computed < r.n && r.score_n < 0;
}

bool Engine::mixed_step(int row, int32_t* first, int64_t budget) {
    Row& r = rows_.at(static_cast<size_t>(row));
    if (!can_mix()) throw std::logic_error("mixed_step on a model whose products depend on the forward's rows");
    if (num_seqs_ == 0) throw std::logic_error("mixed_step with no decoding row");
    if (!mixable(row)) throw std::logic_error("mixed_step of a row whose next forward is not a prompt piece");
    const int64_t c0 = r.computed, P = next_prefill_tokens(row, budget), c1 = c0 + P;
    if (P == 0) throw std::logic_error("prefill budget too small for the next piece");
    const int S = bucket_;
    const std::vector<int> decoding = decoding_rows();
    const int D = static_cast<int>(decoding.size()), T = D + static_cast<int>(P);
    // The piece's inputs first: when one cannot be written nothing has run.
    std::vector<int32_t> pos(static_cast<size_t>(P)), slots(static_cast<size_t>(P));
    for (int64_t i = 0; i < P; ++i) {
        pos[static_cast<size_t>(i)] = static_cast<int32_t>(c0 + i);
        slots[static_cast<size_t>(i)] = slot_of(r, c0 + i);
    }
    std::vector<int32_t> table(static_cast<size_t>(max_blocks_), -1);
    std::copy(r.blocks.begin(), r.blocks.end(), table.begin());
    std::vector<int32_t> qsl(static_cast<size_t>(D) + 2);
    std::iota(qsl.begin(), qsl.end() - 1, 0);
    qsl.back() = T;
    const int32_t seq_len = static_cast<int32_t>(c1);
    std::vector<int32_t> sliding_slots;
    if (slides()) {
        map_sliding(r, c0, c1);
        for (int64_t i = 0; i < P; ++i) sliding_slots.push_back(sliding_slot_of(r, c0 + i));
    }
    try {
        backend_.upload(mx_ids_.slice_rows(D, P), r.tokens.data() + c0);
        backend_.upload(mx_pos_.slice_rows(D, P), pos.data());
        backend_.upload(mx_slots_.slice_rows(D, P), slots.data());
        backend_.upload(mx_seq_lens_.slice_rows(D, 1), &seq_len);
        backend_.upload(mx_tables_.slice_rows(D, 1), table.data());
        backend_.upload(mx_qsl_.slice_rows(0, D + 2), qsl.data());
        if (slides()) {
            backend_.upload(mx_sliding_slots_.slice_rows(D, P), sliding_slots.data());
            backend_.upload(mx_sliding_tables_.slice_rows(D, 1), r.sliding.data());
        }
    } catch (const std::exception& e) {
        throw PieceInputError(e.what());
    }
    // Then the decoding rows' inputs as the step reads them, run by run of consecutive rows.
    write_released_rows();
    move_windows();
    const DecodeState st = step_state(S);
    for (int j = 0; j < D;) {
        const int from = decoding[static_cast<size_t>(j)];
        int n = 1;
        while (j + n < D && decoding[static_cast<size_t>(j + n)] == from + n) ++n;
        backend_.copy(mx_ids_.slice_rows(j, n), st.token_ids.slice_rows(from, n));
        backend_.copy(mx_pos_.slice_rows(j, n), st.positions.slice_rows(from, n));
        backend_.copy(mx_slots_.slice_rows(j, n), st.slot_mapping.slice_rows(from, n));
        backend_.copy(mx_seq_lens_.slice_rows(j, n), st.seq_lens.slice_rows(from, n));
        backend_.copy(mx_tables_.slice_rows(j, n), st.block_tables.slice_rows(from, n));
        if (slides()) backend_.copy(mx_sliding_tables_.slice_rows(j, n), sliding_tables_.slice_rows(from, n));
        j += n;
    }
    StepInputs in;
    in.token_ids = mx_ids_.slice_rows(0, T);
    in.positions = mx_pos_.slice_rows(0, T);
    in.slot_mapping = mx_slots_.slice_rows(0, T);
    in.meta = AttentionMeta{mx_tables_.slice_rows(0, D + 1), mx_seq_lens_.slice_rows(0, D + 1),
                            mx_qsl_.slice_rows(0, D + 2), D + 1, opt_.block_size, interleaved_pairs()};
    if (slides()) {
        // The decode rows' slots in the sliding pool from their positions, as the decode step computes them.
        backend_.kv_slots(mx_pos_.slice_rows(0, D), mx_sliding_tables_.slice_rows(0, D), opt_.block_size,
                          mx_sliding_slots_.slice_rows(0, D));
        in.sliding_block_tables = mx_sliding_tables_.slice_rows(0, D + 1);
        in.sliding_slot_mapping = mx_sliding_slots_.slice_rows(0, T);
    }
    decoder_->forward(in, T, true, forward_rows(r.one_row, r.n, c0), false, D);
    // Each sequence's logits to the row the decode step would give them: the piece's past the bucket (row S), then
    // the decoding rows' from the last down (row j goes to decoding[j] >= j, so no row is overwritten before it is
    // read). The bucket's other rows keep earlier logits, which their sampling reads as in any step: no sequence is
    // there to read the result.
    const Tensor logits = decoder_->logits(S + 1);
    if (D < S) backend_.copy(logits.slice_rows(S, 1), logits.slice_rows(D, 1));
    for (int j = D - 1; j >= 0; --j) {
        const int to = decoding[static_cast<size_t>(j)];
        if (to != j) backend_.copy(logits.slice_rows(to, 1), logits.slice_rows(j, 1));
    }
    sample_and_advance(logits.slice_rows(0, S), st);
    end_step();
    ++mixed_steps_;
    r.computed = c1;
    if (c1 == r.n && sharing()) publish(r, r.n);
    if (c1 < r.n || r.k > 1) return false;
    return complete_prefill(row, first, logits.slice_rows(S, 1));
}

}  // namespace tracelm
