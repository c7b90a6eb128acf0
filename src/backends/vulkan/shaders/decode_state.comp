#version 450
// The on-device decode state (ops/decode_state): ADVANCE feeds the sampled ids into the next step (history[step],
// token ids, positions + 1, seq_lens + 1, the slot from the block table, step + 1); otherwise kv_slots:
// slots[s] = the slot of positions[s] in row s of the block table. -1 where the block is unassigned or past the table.
#include "common.glsl"

layout(constant_id = 0) const bool ADVANCE = false;
layout(local_size_x = 64) in;
layout(binding = 0) buffer Sampled { int sampled[]; };
layout(binding = 1) buffer Ids { int ids[]; };
layout(binding = 2) buffer Positions { int positions[]; };
layout(binding = 3) buffer Slots { int slots[]; };
layout(binding = 4) buffer Lens { int lens[]; };
layout(binding = 5) buffer Tables { int tables[]; };
layout(binding = 6) buffer Step { int step[]; };
layout(binding = 7) buffer History { int history[]; };
layout(push_constant) uniform Push {
    uint sampled_off, ids_off, pos_off, slots_off, lens_off, tables_off, step_off, history_off;
    uint seqs, max_blocks, block_size, history_rows;
} p;

int slot_of(uint s, int pos) {
    const int blk = pos < 0 ? -1 : pos / int(p.block_size);
    const int page = blk >= 0 && blk < int(p.max_blocks) ? tables[p.tables_off + s * p.max_blocks + uint(blk)] : -1;
    return page < 0 ? -1 : page * int(p.block_size) + pos % int(p.block_size);
}

void main() {
    const uint l = gl_LocalInvocationID.x;
    if (!ADVANCE) {
        const uint s = gl_WorkGroupID.x * 64u + l;
        if (s < p.seqs) slots[p.slots_off + s] = slot_of(s, positions[p.pos_off + s]);
        return;
    }
    const int st = step[p.step_off];
    for (uint s = l; s < p.seqs; s += 64u) {
        const int id = sampled[p.sampled_off + s];
        if (st >= 0 && st < int(p.history_rows)) history[p.history_off + uint(st) * p.seqs + s] = id;
        ids[p.ids_off + s] = id;
        const int pos = positions[p.pos_off + s] + 1;
        positions[p.pos_off + s] = pos;
        lens[p.lens_off + s] += 1;
        slots[p.slots_off + s] = slot_of(s, pos);
    }
    barrier();  // every invocation has read step
    if (l == 0u) step[p.step_off] = st + 1;
}
