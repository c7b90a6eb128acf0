#include <cstdint>

#include "backends/cpu/ops/op_support.h"
#include "ops/sampling/sampling.h"

namespace tracelm::cpu {

namespace {

struct ArgmaxArgs {
    const float* logits;
    int32_t* ids;
    int64_t cols;
};
void run_argmax(const ArgmaxArgs& a, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) a.ids[r] = static_cast<int32_t>(sampling::argmax_row(a.logits + r * a.cols, a.cols));
}

struct AdvanceArgs {
    const int32_t* sampled;
    int32_t* token_ids;
    int32_t* positions;
    int32_t* slots;
    int32_t* seq_lens;
    const int32_t* block_tables;
    int32_t* step;
    int32_t* history;
    int64_t history_rows;
    int num_seqs, max_blocks, block_size;
};
void run_advance(const AdvanceArgs& a, int64_t, int64_t) {
    const int32_t step = *a.step;
    for (int s = 0; s < a.num_seqs; ++s) {
        const int32_t id = a.sampled[s];
        if (step >= 0 && step < a.history_rows) a.history[static_cast<int64_t>(step) * a.num_seqs + s] = id;
        a.token_ids[s] = id;
        const int32_t pos = a.positions[s] + 1;
        a.positions[s] = pos;
        a.seq_lens[s] += 1;
        const int32_t blk = pos / a.block_size;
        const int32_t page = blk < a.max_blocks ? a.block_tables[static_cast<int64_t>(s) * a.max_blocks + blk] : -1;
        a.slots[s] = page < 0 ? -1 : page * a.block_size + pos % a.block_size;
    }
    *a.step = step + 1;
}

struct KvSlotsArgs {
    const int32_t* positions;
    const int32_t* block_tables;
    int32_t* slots;
    int max_blocks, block_size;
};
void run_kv_slots(const KvSlotsArgs& a, int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
        const int32_t pos = a.positions[s];
        const int32_t blk = pos < 0 ? -1 : pos / a.block_size;
        const int32_t page = blk >= 0 && blk < a.max_blocks ? a.block_tables[s * a.max_blocks + blk] : -1;
        a.slots[s] = page < 0 ? -1 : page * a.block_size + pos % a.block_size;
    }
}

}  // namespace

void CpuBackend::do_kv_slots(const Tensor& positions, const Tensor& block_tables, int block_size, const Tensor& slots) {
    submit(run_kv_slots,
           KvSlotsArgs{positions.ptr<int32_t>(), block_tables.ptr<int32_t>(), slots.ptr<int32_t>(),
                       static_cast<int>(block_tables.cols), block_size},
           Footprint().read(positions).read(block_tables).write(slots), slots.numel());
}

void CpuBackend::do_argmax(const Tensor& logits, const Tensor& ids) {
    submit(run_argmax, ArgmaxArgs{logits.ptr<float>(), ids.ptr<int32_t>(), logits.cols},
           Footprint().read(logits).write(ids), logits.rows);
}

void CpuBackend::do_advance_decode(const Tensor& sampled, const DecodeState& st) {
    submit(run_advance,
           AdvanceArgs{sampled.ptr<int32_t>(), st.token_ids.ptr<int32_t>(), st.positions.ptr<int32_t>(),
                       st.slot_mapping.ptr<int32_t>(), st.seq_lens.ptr<int32_t>(), st.block_tables.ptr<int32_t>(),
                       st.step.ptr<int32_t>(), st.history.ptr<int32_t>(), st.history.rows, static_cast<int>(st.token_ids.numel()),
                       static_cast<int>(st.block_tables.cols), st.block_size},
           Footprint()
               .read(sampled)
               .read(st.block_tables)
               .write(st.token_ids)
               .write(st.positions)
               .write(st.slot_mapping)
               .write(st.seq_lens)
               .write(st.step)
               .write(st.history),
           1);
}

}  // namespace tracelm::cpu
