#version 450
// DeepSeek sparse attention's top-k (ops/dsa/dsa_topk.h, docs/dsa.md), one workgroup per row: the scores of the row's
// window become order_key's order-preserving integers (every NaN 0, -0.0 as +0.0); the topk-th largest key is found
// bit by bit (32 counting passes), then one ordered pass, by prefix sums over 256 keys at a time, writes the keys
// above it and the first ties at it in ascending key order. A window of at most topk keys is written whole, then -1.
// CAUSAL (dsa_topk_causal): row t's window is [0, seq_len - q_len + i + 1) of its sequence from query_start_loc and
// seq_lens, empty for a row of no sequence; otherwise [start[t], end[t]) (i64), clamped to the keys.
#include "common.glsl"

layout(constant_id = 0) const bool CAUSAL = false;
layout(local_size_x = 256) in;
layout(binding = 0) buffer Scores { float scores[]; };
layout(binding = 1) buffer Start { uint wstart[]; };  // i64 as (low, high) words
layout(binding = 2) buffer End { uint wend[]; };
layout(binding = 3) buffer Qsl { int qsl[]; };
layout(binding = 4) buffer Lens { int lens[]; };
layout(binding = 5) buffer Indices { uint indices[]; };  // i64 as (low, high) words
layout(push_constant) uniform Push { uint scores_off, start_off, end_off, qsl_off, lens_off, idx_off, keys, topk, seqs; } p;

shared uint count;
shared uint scan[256];

uint order_key(float x) {
    uint b = floatBitsToUint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0u;
    if (b == 0x80000000u) b = 0u;
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

// An i64 (low, high words) clamped to [0, keys].
uint clamp_keys(uint lo, uint hi) {
    if (int(hi) < 0) return 0u;
    return hi != 0u || lo > p.keys ? p.keys : lo;
}

void put(uint at, uint lo, uint hi) {
    indices[at] = lo;
    indices[at + 1u] = hi;
}

void main() {
    const uint row = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
    uint s0 = 0u, s1 = 0u;
    if (CAUSAL) {
        for (uint s = 0u; s < p.seqs; ++s) {
            const int q0 = qsl[p.qsl_off + s], q1 = qsl[p.qsl_off + s + 1u];
            if (q0 <= int(row) && int(row) < q1) {
                const int end = lens[p.lens_off + s] - (q1 - q0) + (int(row) - q0) + 1;
                s1 = end <= 0 ? 0u : min(uint(end), p.keys);
                break;
            }
        }
    } else {
        s0 = clamp_keys(wstart[p.start_off + 2u * row], wstart[p.start_off + 2u * row + 1u]);
        s1 = clamp_keys(wend[p.end_off + 2u * row], wend[p.end_off + 2u * row + 1u]);
    }
    const uint n = s1 > s0 ? s1 - s0 : 0u, out0 = p.idx_off + 2u * row * p.topk, base = p.scores_off + row * p.keys + s0;
    if (n <= p.topk) {  // the whole window, then -1 (the same for every invocation)
        for (uint j = lid; j < p.topk; j += 256u) put(out0 + 2u * j, j < n ? s0 + j : 0xffffffffu, j < n ? 0u : 0xffffffffu);
        return;
    }
    // The threshold: the largest key with at least topk window keys at or above it.
    uint thr = 0u;
    for (int bit = 31; bit >= -1; --bit) {
        const uint cand = bit >= 0 ? thr | (1u << uint(bit)) : thr + 1u;  // the last pass counts the keys above thr
        if (lid == 0u) count = 0u;
        barrier();
        if (bit < 0 && thr == 0xffffffffu) break;  // nothing above (uniform)
        uint c = 0u;
        for (uint i = lid; i < n; i += 256u)
            if (order_key(scores[base + i]) >= cand) ++c;
        atomicAdd(count, c);
        barrier();
        if (bit >= 0 && count >= p.topk) thr = cand;
        if (bit >= 0) barrier();  // count is read before it is cleared
    }
    const uint above = thr == 0xffffffffu ? 0u : count, need = p.topk - above;  // ties at thr to take, >= 1
    uint written = 0u, ties = 0u;
    for (uint c0 = 0u; c0 < n && written < p.topk; c0 += 256u) {
        const uint i = c0 + lid, k = i < n ? order_key(scores[base + i]) : 0u;
        const bool gt = i < n && k > thr, eq = i < n && k == thr;
        // Inclusive prefix sums of (ties, keys above) in the low and high 16 bits.
        scan[lid] = (eq ? 1u : 0u) | (gt ? 0x10000u : 0u);
        barrier();
        for (uint off = 1u; off < 256u; off <<= 1) {
            const uint v = lid >= off ? scan[lid - off] : 0u;
            barrier();
            scan[lid] += v;
            barrier();
        }
        const uint incl = scan[lid], tot = scan[255];
        const uint eq_before = (incl & 0xffffu) - (eq ? 1u : 0u), gt_before = (incl >> 16) - (gt ? 1u : 0u);
        if (gt || (eq && ties + eq_before < need))
            put(out0 + 2u * (written + gt_before + min(ties + eq_before, need) - min(ties, need)), s0 + i, 0u);
        written += (tot >> 16) + min(ties + (tot & 0xffffu), need) - min(ties, need);
        ties += tot & 0xffffu;
        barrier();  // scan is read before the next chunk writes it
    }
}
