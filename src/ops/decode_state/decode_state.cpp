// The decode_state family's entry points: arguments checked once, then the backend's do_<op>.
#include "ops/decode_state/decode_state.h"

#include "runtime/backend.h"
#include "runtime/op_checks.h"

namespace tracelm {

using checks::require;
using checks::require_dtype;

void Backend::argmax(const Tensor& logits, const Tensor& ids) {
    require_dtype(logits, DType::F32, "argmax");
    require_dtype(ids, DType::I32, "argmax");
    require(ids.numel() == logits.rows && logits.cols > 0, "argmax", "shape mismatch");
    do_argmax(logits, ids);
}

void Backend::advance_decode(const Tensor& sampled, const DecodeState& st) {
    for (const Tensor* t : {&sampled, &st.token_ids, &st.positions, &st.slot_mapping, &st.seq_lens, &st.block_tables,
                            &st.step, &st.history})
        require_dtype(*t, DType::I32, "advance_decode");
    const int64_t S = st.token_ids.numel();
    require(sampled.numel() == S && st.positions.numel() == S && st.slot_mapping.numel() == S &&
                st.seq_lens.numel() == S && st.block_tables.rows == S && st.history.cols == S && st.block_size > 0,
            "advance_decode", "shape mismatch");
    do_advance_decode(sampled, st);
}

void Backend::kv_slots(const Tensor& positions, const Tensor& block_tables, int block_size, const Tensor& slots) {
    for (const Tensor* t : {&positions, &block_tables, &slots}) require_dtype(*t, DType::I32, "kv_slots");
    require(positions.numel() == slots.numel() && block_tables.rows == slots.numel() && block_size > 0, "kv_slots",
            "shape mismatch");
    do_kv_slots(positions, block_tables, block_size, slots);
}

}  // namespace tracelm
