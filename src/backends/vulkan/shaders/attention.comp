#version 450
// Causal paged attention over f32 or f16 (F16) caches, in f32 arithmetic, one workgroup per (token, head). Token t of sequence s (query i of its q_len)
// sees the keys at positions [start, visible): visible = min(seq_len - q_len + i + 1, max_blocks * block_size), start
// = 0, or with a sliding window the last `window` of them (as the CPU backend, paged_attention.cpp); a key whose block
// is unassigned (or whose slot is past the cache) is skipped, and a query that sees none gives zeros. With INDICES
// (sparse_attention) the keys are instead the positions in row t of indices [T, topk] (i64; -1 and positions the row
// may not see are skipped). Two passes: the maximum score, then the softmax-weighted sum of values 64 keys at a time.
#include "common.glsl"

layout(constant_id = 0) const bool INDICES = false;
layout(constant_id = 1) const bool F16 = false;
layout(local_size_x = 64) in;
layout(binding = 0) buffer Q { float q[]; };
layout(binding = 1) buffer KCache { uint kc[]; };
layout(binding = 2) buffer VCache { uint vc[]; };
layout(binding = 3) buffer Tables { int tables[]; };
layout(binding = 4) buffer Lens { int lens[]; };
layout(binding = 5) buffer Qsl { int qsl[]; };
layout(binding = 6) buffer Out { float out_[]; };
layout(binding = 7) buffer Indices { uint indices[]; };  // i64 as (low, high) words
// kc_off and vc_off in elements of the cache type.
layout(push_constant) uniform Push {
    uint q_off, kc_off, vc_off, tables_off, lens_off, qsl_off, out_off;
    uint seqs, max_blocks, block_size, heads, kv_heads, head_dim, window, slots;
    float scale;
    uint indices_off, topk;  // INDICES: word offset of indices and its row length
} p;

shared float qv[512];
shared float red[64];
shared float probs[64];
shared int key_slots[64];

// Element i of a cache, f32 or f16.
#define CACHE_AT(arr, i) (F16 ? f16_bits_to_f32(HALF_OF(arr, (i))) : uintBitsToFloat(arr[(i)]))

int slot_of(uint s, int pos) {
    const int block = tables[p.tables_off + s * p.max_blocks + uint(pos) / p.block_size];
    if (block < 0) return -1;
    const int slot = block * int(p.block_size) + pos % int(p.block_size);
    return uint(slot) < p.slots ? slot : -1;
}

// The cache slot of the c-th key candidate of token t (-1: none): position start + c, or indices[t, c].
int candidate_slot(uint s, uint t, int c, int start, int visible) {
    int pos = start + c;
    if (INDICES) {
        const uint at = p.indices_off + 2u * (t * p.topk + uint(c));
        if (int(indices[at + 1u]) != 0 || indices[at] >= 0x80000000u) return -1;  // negative or past 2^31
        pos = int(indices[at]);
        if (pos < start || pos >= visible) return -1;
    }
    return slot_of(s, pos);
}

void main() {
    const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, l = gl_LocalInvocationID.x, hd = p.head_dim;
    const uint out_row = p.out_off + (t * p.heads + h) * hd;
    uint s = 0u;
    while (s < p.seqs && !(qsl[p.qsl_off + s] <= int(t) && int(t) < qsl[p.qsl_off + s + 1u])) ++s;
    int start = 0, visible = 0;
    if (s < p.seqs) {
        const int q_len = qsl[p.qsl_off + s + 1u] - qsl[p.qsl_off + s];
        const int end = lens[p.lens_off + s] - q_len + (int(t) - qsl[p.qsl_off + s]) + 1;
        visible = min(end, int(p.max_blocks * p.block_size));
        if (p.window > 0u) start = clamp(end - int(p.window), 0, max(visible, 0));
    }
    for (uint d = l; d < hd; d += 64u) qv[d] = q[p.q_off + (t * p.heads + h) * hd + d];
    barrier();
    const uint kv_row = (h / (p.heads / p.kv_heads)) * hd, kv_dim = p.kv_heads * hd;

    const int candidates = INDICES ? (s < p.seqs ? int(p.topk) : 0) : visible - start;

    // Pass 1: the largest score.
    float m = uintBitsToFloat(0xff800000u);  // -inf
    for (int c = int(l); c < candidates; c += 64) {
        const int slot = candidate_slot(s, t, c, start, visible);
        if (slot < 0) continue;
        float dot = 0.0;
        for (uint d = 0u; d < hd; ++d) dot += qv[d] * CACHE_AT(kc, p.kc_off + uint(slot) * kv_dim + kv_row + d);
        m = max(m, dot * p.scale);
    }
    red[l] = m;
    barrier();
    [[unroll]] for (uint w = 32u; w > 0u; w >>= 1) {
        if (l < w) red[l] = max(red[l], red[l + w]);
        barrier();
    }
    const float mx = red[0];
    float acc[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);  // dims l, l + 64, ... (head_dim <= 512)
    float sum = 0.0;
    if (mx != uintBitsToFloat(0xff800000u)) {
        // Pass 2: each invocation scores one key of the chunk, then every invocation adds the chunk's values for
        // its dimensions.
        for (int base = 0; base < candidates; base += 64) {
            const int c = base + int(l);
            const int slot = c < candidates ? candidate_slot(s, t, c, start, visible) : -1;
            float pj = 0.0;
            if (slot >= 0) {
                float dot = 0.0;
                for (uint d = 0u; d < hd; ++d) dot += qv[d] * CACHE_AT(kc, p.kc_off + uint(slot) * kv_dim + kv_row + d);
                pj = exp(dot * p.scale - mx);
            }
            probs[l] = pj;
            key_slots[l] = slot;
            barrier();
            for (uint k = 0u; k < 64u; ++k) {
                if (key_slots[k] < 0) continue;
                sum += probs[k];
                const uint v_row = p.vc_off + uint(key_slots[k]) * kv_dim + kv_row;
                [[unroll]] for (uint i = 0u; i < 8u; ++i)
                    if (l + 64u * i < hd) acc[i] += probs[k] * CACHE_AT(vc, v_row + l + 64u * i);
            }
            barrier();
        }
    }
    [[unroll]] for (uint i = 0u; i < 8u; ++i)
        if (l + 64u * i < hd) out_[out_row + l + 64u * i] = sum > 0.0 ? acc[i] / sum : 0.0;
}
