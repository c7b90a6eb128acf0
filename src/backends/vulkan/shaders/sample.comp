#version 450
// sample (ops/sampling/sampling.h), one workgroup per row, after the CUDA kernel (backends/cuda/sampling.cu):
// penalties, the maximum and argmax, and the masses are workgroup-parallel; the k best tokens come from a radix
// selection of the k-th best order key (dsa_topk's order_key), 8 bits a pass, emitted in id order from per-invocation
// chunks and ranked by a radix sort. Masses are summed in per-invocation chunks; the walks (top-p prefix, draw)
// skip chunks by their sums and walk one on one invocation. The draw is formed in f64 as on the CPU; GLSL has no f64
// exp or log, so exp_d and log_d below give them within a few ulp.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) buffer Logits { float x[]; };
layout(binding = 1) buffer Params { uint params[]; };
layout(binding = 2) buffer Counts { int counts[]; };
layout(binding = 3) buffer Step { int step[]; };
layout(binding = 4) buffer Ids { int ids[]; };
layout(binding = 5) buffer Logprobs { float logprobs[]; };
layout(binding = 6) buffer TopIds { int top_ids[]; };
// Per row 4 * vocab words: sel (the selected ids, ascending), cand (the same in rank order), the radix sort's
// second buffer, rank (of each sel).
layout(binding = 7) buffer Workspace { int ws[]; };
layout(push_constant) uniform Push {
    uint logits, params, counts, step, ids, logprobs, top_ids, vocab, step_offset, param_words, max_logprobs, count_mask;
} p;

const uint N = 256u;  // invocations, and the radix's digits
// -inf (not constant expressions in GLSL).
#define NEG_INF_F uintBitsToFloat(0xff800000u)
#define NEG_INF packDouble2x32(uvec2(0u, 0xfff00000u))

shared double sums[N];
shared uint hist[N];
shared uint scan_a[N], scan_b[N];
shared uint digit_counts[16u * N];
shared float red_v[N];
shared int red_i[N];
shared uint red_n[N];
shared float sh_m;
shared uint sh_valid, sh_argmax, sh_digit, sh_need;
shared int sh_id;
shared double sh_z;

// sampling::RowParams, word by word.
struct RowParams {
    float temperature;
    int top_k;
    float top_p, min_p, repetition, presence, frequency;
    uint seed_lo, seed_hi;
    int logprobs, draw_base, forced;
};

// Buffer writes of one invocation seen by the others after it (barrier() alone orders shared memory only).
void sync() {
    memoryBarrierBuffer();
    memoryBarrierShared();
    barrier();
}

bool is_nan(float v) { return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u; }
bool is_pos_inf(float v) { return floatBitsToUint(v) == 0x7f800000u; }

// dsa::order_key: larger floats give larger keys, every NaN 0, -0.0 as +0.0.
uint order_key(float v) {
    uint b = floatBitsToUint(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0u;
    if (b == 0x80000000u) b = 0u;
    return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}

// sampling::philox4x32_10 and sampling::uniform: 53 random bits as (hi 32 << 21) + (next 32 >> 11), exact in f64.
double uniform01(uint seed_lo, uint seed_hi, uint draw) {
    uvec4 c = uvec4(draw, 0u, 0u, 0u);
    uint k0 = seed_lo, k1 = seed_hi;
    for (int i = 0; i < 10; ++i) {
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return ldexp(double(c.x) * 2097152.0LF + double(c.y >> 11), -53);
}

// exp of a <= 0 in f64: a = k ln2 + r with |r| <= ln2 / 2 (ln2 split so that k * hi is exact), e^r by its Taylor
// series to r^13 (the next term is below 2^-53). Below -708 it gives 0: such a weight is under 2^-1021 of the
// maximum's, which weighs 1.
double exp_d(double a) {
    if (a < -708.0LF) return 0.0LF;
    const double k = floor(a * 1.4426950408889634LF + 0.5LF);
    const double r = (a - k * 6.93147180369123816490e-01LF) - k * 1.90821492927058770002e-10LF;
    double s = 1.0LF / 6227020800.0LF;  // 1 / 13!
    s = s * r + 1.0LF / 479001600.0LF;
    s = s * r + 1.0LF / 39916800.0LF;
    s = s * r + 1.0LF / 3628800.0LF;
    s = s * r + 1.0LF / 362880.0LF;
    s = s * r + 1.0LF / 40320.0LF;
    s = s * r + 1.0LF / 5040.0LF;
    s = s * r + 1.0LF / 720.0LF;
    s = s * r + 1.0LF / 120.0LF;
    s = s * r + 1.0LF / 24.0LF;
    s = s * r + 1.0LF / 6.0LF;
    s = s * r + 0.5LF;
    s = s * r + 1.0LF;
    s = s * r + 1.0LF;
    return ldexp(s, int(k));
}

// log of z > 0 in f64: z = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(f), f = (m - 1) / (m + 1), by its
// series to f^23 (|f| <= 0.172, so the next term is below 2^-53 of the sum).
double log_d(double z) {
    int e;
    double m = frexp(z, e);
    if (m < 0.70710678118654752LF) {
        m *= 2.0LF;
        e -= 1;
    }
    const double f = (m - 1.0LF) / (m + 1.0LF), s = f * f;
    double t = 1.0LF / 23.0LF;
    for (int i = 21; i >= 1; i -= 2) t = t * s + 1.0LF / double(i);
    return double(e) * 6.93147180369123816490e-01LF + (double(e) * 1.90821492927058770002e-10LF + 2.0LF * f * t);
}

// sampling::penalise, with the CPU's roundings (no fused multiply-add, a correctly rounded division).
float penalise(float v, int count, RowParams q) {
    if (count == 0) return v;
    // The quotient in f64, rounded to f32: correctly rounded (f64 holds more than twice f32's bits), where an f32
    // quotient corrected by its fma remainder is off by an ulp on lavapipe.
    precise float y = v > 0.0 ? float(double(v) / double(q.repetition)) : v * q.repetition;
    const int g = count & int(p.count_mask);
    precise float f = float(g) * q.frequency;
    precise float out_v = (y - f) - (g > 0 ? q.presence : 0.0);
    return out_v;
}

// sampling::weight and log_weight against the row maximum m.
double weight(float v, float m, double inv_t) {
    if (is_pos_inf(m)) return v == m ? 1.0LF : 0.0LF;
    return exp_d((double(v) - double(m)) * inv_t);
}
double log_weight(float v, float m) {
    if (is_pos_inf(m)) return v == m ? 0.0LF : NEG_INF;
    return double(v) - double(m);
}

uint row_base, V, l, ws_sel, ws_cand, ws_tmp, ws_rank;

// The maximum over the non-NaN logits, the lowest index holding it (argmax_row's answer) and the non-NaN count, into
// sh_m, sh_argmax, sh_valid: (value, index) pairs have one best under this order whatever the reduction's shape.
void find_max() {
    float bv = 0.0;
    int bi = -1;
    uint n = 0u;
    for (uint v = l; v < V; v += N) {
        const float xv = x[row_base + v];
        if (is_nan(xv)) continue;
        ++n;
        if (bi < 0 || xv > bv) {
            bv = xv;
            bi = int(v);
        }
    }
    red_v[l] = bv;
    red_i[l] = bi;
    red_n[l] = n;
    barrier();
    for (uint s = N / 2u; s > 0u; s >>= 1) {
        if (l < s) {
            const float ov = red_v[l + s];
            const int oi = red_i[l + s];
            if (oi >= 0 && (red_i[l] < 0 || ov > red_v[l] || (ov == red_v[l] && oi < red_i[l]))) {
                red_v[l] = ov;
                red_i[l] = oi;
            }
            red_n[l] += red_n[l + s];
        }
        barrier();
    }
    if (l == 0u) {
        sh_m = red_i[0] >= 0 ? red_v[0] : NEG_INF_F;
        sh_argmax = uint(max(red_i[0], 0));
        sh_valid = red_n[0];
    }
    barrier();
}

// Exclusive prefix sums of scan_a and scan_b in invocation order, in place.
void scan_pair() {
    barrier();
    if (l == 0u) {
        uint a = 0u, b = 0u;
        for (uint t = 0u; t < N; ++t) {
            const uint na = a + scan_a[t], nb = b + scan_b[t];
            scan_a[t] = a;
            scan_b[t] = b;
            a = na;
            b = nb;
        }
    }
    barrier();
}

// cand: sel's k tokens in rank order, and rank[i]: the rank of sel[i], by a stable LSD radix sort of the indices
// into sel (ascending ids, so equal logits stay in id order) on the inverted order key, 4 bits a pass. Counting
// ranks pairwise would take k * k / N steps an invocation, past what lavapipe runs of one loop for a widened top-p.
void rank_selection(uint k) {
    const uint b = k * l / N, e = k * (l + 1u) / N;
    for (uint i = b; i < e; ++i) ws[ws_cand + i] = int(i);
    sync();
    uint src = ws_cand, dst = ws_tmp;
    for (uint shift = 0u; shift < 32u; shift += 4u) {
        uint at[16];
        for (uint d = 0u; d < 16u; ++d) at[d] = 0u;
        for (uint i = b; i < e; ++i) ++at[(~order_key(x[row_base + ws[ws_sel + ws[src + i]]]) >> shift) & 15u];
        for (uint d = 0u; d < 16u; ++d) digit_counts[d * N + l] = at[d];
        barrier();
        // Invocation d < 16 places digit d's chunks: its exclusive prefix over the invocations, then its total.
        if (l < 16u) {
            uint sum = 0u;
            for (uint t = 0u; t < N; ++t) {
                const uint c = digit_counts[l * N + t];
                digit_counts[l * N + t] = sum;
                sum += c;
            }
            scan_a[l] = sum;
        }
        barrier();
        if (l == 0u) {
            uint sum = 0u;
            for (uint d = 0u; d < 16u; ++d) {
                const uint c = scan_a[d];
                scan_a[d] = sum;
                sum += c;
            }
        }
        barrier();
        for (uint d = 0u; d < 16u; ++d) at[d] = scan_a[d] + digit_counts[d * N + l];
        for (uint i = b; i < e; ++i) {
            const int idx = ws[src + i];
            ws[dst + at[(~order_key(x[row_base + ws[ws_sel + idx]]) >> shift) & 15u]++] = idx;
        }
        sync();
        const uint t = src;
        src = dst;
        dst = t;
    }
    // Eight passes leave the sorted indices in cand, each replaced by its token.
    for (uint i = b; i < e; ++i) {
        const int idx = ws[ws_cand + i];
        ws[ws_rank + uint(idx)] = int(i);
        ws[ws_cand + i] = ws[ws_sel + uint(idx)];
    }
    sync();
}

// The lists the masses are summed and walked over: the vocabulary (the tokens at or above the floor `lo`); sel in
// id order (those of rank below n at or above `lo`); cand in rank order (all).
const int OVER_VOCAB = 0, OVER_KEPT = 1, OVER_RANKED = 2;

// Element i of the list `over`: its token, or -1 where it does not count.
int member(int over, uint i, uint n, double lo) {
    if (over == OVER_VOCAB) {
        const float xv = x[row_base + i];
        return is_nan(xv) || double(xv) < lo ? -1 : int(i);
    }
    if (over == OVER_KEPT) {
        const int v = ws[ws_sel + i];
        return uint(ws[ws_rank + i]) < n && double(x[row_base + uint(v)]) >= lo ? v : -1;
    }
    return ws[ws_cand + i];
}

// The sum of weight(x, m, inv_t) over the first len elements of `over` that count: each invocation sums its
// contiguous chunk in order, then the chunk sums (kept in sums, for walk) are added in order.
double chunked_sum(int over, uint len, uint n, double lo, double inv_t) {
    const uint b = len * l / N, e = len * (l + 1u) / N;
    double s = 0.0LF;
    for (uint i = b; i < e; ++i) {
        const int v = member(over, i, n, lo);
        if (v >= 0) s += weight(x[row_base + uint(v)], sh_m, inv_t);
    }
    sums[l] = s;
    barrier();
    if (l == 0u) {
        double z = 0.0LF;
        for (uint t = 0u; t < N; ++t) z += sums[t];
        sh_z = z;
    }
    barrier();
    return sh_z;
}

// After chunked_sum of the same list: the index of the first element where the running sum exceeds `target` (reaches
// it, with `reach`), or -1 where rounding lets none. One invocation skips whole chunks by their sums, then walks one:
// no loop is longer than N + len / N steps (lavapipe stops one that runs past 65535).
int walk(int over, uint len, uint n, double lo, double inv_t, double target, bool reach) {
    if (l == 0u) {
        double cum = 0.0LF;
        uint t = 0u;
        while (t + 1u < N && (reach ? cum + sums[t] < target : cum + sums[t] <= target)) cum += sums[t++];
        int found = -1;
        for (uint i = len * t / N, e = len * (t + 1u) / N; i < e; ++i) {
            const int v = member(over, i, n, lo);
            if (v < 0) continue;
            cum += weight(x[row_base + uint(v)], sh_m, inv_t);
            if (reach ? cum >= target : cum > target) {
                found = int(i);
                break;
            }
        }
        sh_id = found;
    }
    barrier();
    const int found = sh_id;
    barrier();
    return found;
}

// sel: the k best non-NaN tokens (k <= valid) in ascending id order; cand: the same in rank order; rank[i]: the
// rank of sel[i]. Returns their mass at temperature 1 summed in ascending id order.
double best(uint k) {
    // The k-th best key, 8 bits a pass from the top: each pass histograms the next digit of the keys whose higher
    // digits are those chosen so far.
    uint prefix = 0u, mask = 0u, need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[l] = 0u;
        barrier();
        for (uint v = l; v < V; v += N) {
            const uint key = order_key(x[row_base + v]);
            if ((key & mask) == prefix) atomicAdd(hist[(key >> shift) & 255u], 1u);
        }
        barrier();
        if (l == 0u) {
            uint above = 0u;
            for (int d = 255; d >= 0; --d) {
                const uint c = hist[d];
                if (c > 0u && above < need && above + c >= need) {
                    sh_digit = uint(d);
                    sh_need = need - above;
                    break;
                }
                above += c;
            }
        }
        barrier();
        prefix |= sh_digit << shift;
        mask |= 255u << shift;
        need = sh_need;
        barrier();
    }
    // Emission in id order: invocation l owns ids [b, e) and writes its taken ids after those taken before them
    // (the keys above the k-th, and the first `need` equal to it).
    const uint b = V * l / N, e = V * (l + 1u) / N;
    uint gt = 0u, eq = 0u;
    for (uint v = b; v < e; ++v) {
        const uint key = order_key(x[row_base + v]);
        gt += key > prefix ? 1u : 0u;
        eq += key == prefix ? 1u : 0u;
    }
    scan_a[l] = gt;
    scan_b[l] = eq;
    scan_pair();
    uint ties = scan_b[l];
    uint pos = scan_a[l] + min(ties, need);
    for (uint v = b; v < e; ++v) {
        const uint key = order_key(x[row_base + v]);
        if (key > prefix || (key == prefix && ties++ < need)) ws[ws_sel + pos++] = int(v);
    }
    sync();
    rank_selection(k);
    return chunked_sum(OVER_RANKED, k, k, NEG_INF, 1.0LF);
}

int draw_token(RowParams q, uint draw) {
    const double inv_t = 1.0LF / double(q.temperature);
    const double lo = q.min_p > 0.0 ? double(sh_m) + log_d(double(q.min_p)) : NEG_INF;
    const double u = uniform01(q.seed_lo, q.seed_hi, draw);
    const uint valid = sh_valid;
    const bool top_k = q.top_k > 0 && uint(q.top_k) < valid;
    if (!top_k && q.top_p >= 1.0) {
        // Every valid token at or above the min_p floor.
        const int v = walk(OVER_VOCAB, V, 0u, lo, inv_t, u * chunked_sum(OVER_VOCAB, V, 0u, lo, inv_t), false);
        return v >= 0 ? v : int(sh_argmax);
    }
    uint n = top_k ? uint(q.top_k) : min(64u, valid);
    uint selected = n;
    double z = best(n);
    if (q.top_p < 1.0) {
        if (!top_k) z = chunked_sum(OVER_VOCAB, V, 0u, NEG_INF, 1.0LF);
        const double goal = double(q.top_p) * z;
        // The shortest rank prefix reaching the goal; without top_k, widen the selection until it holds one.
        for (;;) {
            const bool reached = chunked_sum(OVER_RANKED, n, n, NEG_INF, 1.0LF) >= goal;
            if (reached || top_k || n == valid) {
                const int last = reached ? walk(OVER_RANKED, n, n, NEG_INF, 1.0LF, goal, true) : -1;
                n = last >= 0 ? uint(last) + 1u : n;
                break;
            }
            n = min(n * 8u, valid);
            selected = n;
            best(n);
        }
    }
    // The kept ranks (the top-p prefix, then min_p's floor) walked in id order.
    const double w = chunked_sum(OVER_KEPT, selected, n, lo, inv_t);
    const int i = walk(OVER_KEPT, selected, n, lo, inv_t, u * w, false);
    return i >= 0 ? ws[ws_sel + uint(i)] : int(sh_argmax);
}

void main() {
    const uint r = group_index();
    l = gl_LocalInvocationID.x;
    V = p.vocab;
    row_base = p.logits + r * V;
    ws_sel = r * 4u * V;
    ws_cand = ws_sel + V;
    ws_tmp = ws_cand + V;
    ws_rank = ws_tmp + V;
    const uint pw = p.params + r * p.param_words;
    RowParams q;
    q.temperature = uintBitsToFloat(params[pw]);
    q.top_k = int(params[pw + 1u]);
    q.top_p = uintBitsToFloat(params[pw + 2u]);
    q.min_p = uintBitsToFloat(params[pw + 3u]);
    q.repetition = uintBitsToFloat(params[pw + 4u]);
    q.presence = uintBitsToFloat(params[pw + 5u]);
    q.frequency = uintBitsToFloat(params[pw + 6u]);
    q.seed_lo = params[pw + 7u];
    q.seed_hi = params[pw + 8u];
    q.logprobs = int(params[pw + 9u]);
    q.draw_base = int(params[pw + 10u]);
    q.forced = int(params[pw + 11u]);
    const uint counts_base = p.counts + r * V;
    if (q.repetition != 1.0 || q.presence != 0.0 || q.frequency != 0.0) {
        for (uint v = l; v < V; v += N) x[row_base + v] = penalise(x[row_base + v], counts[counts_base + v], q);
        sync();
    }
    find_max();
    const bool live = sh_m > NEG_INF_F;
    int id = int(sh_argmax);
    if (q.forced > 0 && uint(q.forced) <= V) {
        id = q.forced - 1;
    } else if (q.temperature != 0.0 && live) {
        id = draw_token(q, uint(step[p.step]) + p.step_offset - uint(q.draw_base));
    }
    if (q.logprobs >= 0) {
        const double log_z = live ? log_d(chunked_sum(OVER_VOCAB, V, 0u, NEG_INF, 1.0LF)) : 0.0LF;
        const uint n = min(uint(q.logprobs), sh_valid);
        if (n > 0u) best(n);
        if (l == 0u) {
            const uint lp = p.logprobs + r * (1u + p.max_logprobs), top = p.top_ids + r * p.max_logprobs;
            logprobs[lp] = live ? float(log_weight(x[row_base + id], sh_m) - log_z) : NEG_INF_F;
            for (uint i = 0u; i < p.max_logprobs; ++i) {
                const int c = i < n ? ws[ws_cand + i] : -1;
                top_ids[top + i] = c;
                logprobs[lp + 1u + i] = i < n && live ? float(log_weight(x[row_base + c], sh_m) - log_z) : NEG_INF_F;
            }
        }
    }
    if (l == 0u) {
        ids[p.ids + r] = id;
        counts[counts_base + id] += 1;
    }
}
