#version 450
// y[t,n] = w[n,:] . x[t,:] (+ bias[n]) for GGML's K-type weights (QTYPE: Q4_K, Q5_K, Q6_K) against x in Q8_K blocks
// (quantize_q8_k.comp), in the float operations and order of the CPU backend (backends/cpu/kernels/quant.h), which
// are ggml's AVX2 ones: TILED 0 is ggml's vec_dot (8 float lanes of exact integer sums, one fma each per block, the
// min term in its own accumulators, a fixed pairwise sum), TILED 1 its tiled kernel's order for products of 8 or more
// rows (one exact integer sum per block, d * s1 (- dmin * s2), one fma by x.d). One invocation per output, so the
// order is the CPU's and the result the same bits. Needs shaderFloat64 (for the fma).
#include "common.glsl"

layout(constant_id = 0) const uint QTYPE = WTYPE_Q4_K;
layout(constant_id = 1) const uint TILED = 0u;
layout(local_size_x = 64) in;
layout(binding = 0) buffer Xq { uint xq[]; };
layout(binding = 1) buffer W { uint w[]; };
layout(binding = 2) buffer Bias { float bias[]; };
layout(binding = 3) buffer Y { float y[]; };
// w_off in bytes (from the bound window); n0, rows: the window's first weight row and its rows (N: all rows, the
// output row stride); a weight row is K / 256 blocks.
layout(push_constant) uniform Push { uint w_off, bias_off, y_off, K, N, has_bias, n0, rows; } p;

// fma(a, b, c) rounded once, as in matmul_q.comp.
float fma_rn(float a, float b, float c) { return float(double(a) * double(b) + double(c)); }

// Activation block at word xb (quantize_q8_k.comp): the sum of q over 16 elements g, and q's word holding element e.
#define XQ_BSUM(xb, g) int(xq[(xb) + 1u + (g)])
#define XQ_WORD(xb, e) int(xq[(xb) + 17u + ((e) >> 2)])

// The weight integers of elements e..e+3 (e a multiple of 4) dotted with the activation's.
int dot4(uint wb, uint xb, uint e) {
    const int xw = XQ_WORD(xb, e);
    int s = 0;
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
        const int q = QTYPE == WTYPE_Q6_K ? Q6K_Q(w, wb, e + j) : K45_Q(w, QTYPE, wb, e + j);
        s += q * bitfieldExtract(xw, int(8u * j), 8);
    }
    return s;
}

void main() {
    const uint n = gl_WorkGroupID.x * 64u + gl_LocalInvocationID.x, t = gl_WorkGroupID.y;
    if (n >= p.rows) return;
    const uint blocks = p.K / 256u;
    precise float acc[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    precise float accm[4] = float[4](0.0, 0.0, 0.0, 0.0);
    precise float summs = 0.0, tiled = 0.0;
    for (uint b = 0u; b < blocks; ++b) {
        const uint wb = p.w_off + (n * blocks + b) * kblock_bytes(QTYPE), xb = (t * blocks + b) * 81u;
        const float xd = uintBitsToFloat(xq[xb]);
        int lane[8] = int[8](0, 0, 0, 0, 0, 0, 0, 0);
        int s1 = 0, s2 = 0;
        if (QTYPE == WTYPE_Q6_K) {
            // Lane l: over every 32 elements, elements 4l..4l+3 times the scale of the 16 they lie in (q unsigned),
            // less 32 times the scaled activation sums of 16 numbers 2l, 2l+1. Tiled: all of it in one sum.
            for (uint c = 0u; c < 8u; ++c)
                [[unroll]] for (uint l = 0u; l < 8u; ++l)
                    lane[l] += Q6K_SCALE(w, wb, 2u * c + l / 4u) * dot4(wb, xb, 32u * c + 4u * l);
            [[unroll]] for (uint l = 0u; l < 8u; ++l) {
                lane[l] -= 32 * (Q6K_SCALE(w, wb, 2u * l) * XQ_BSUM(xb, 2u * l) +
                                 Q6K_SCALE(w, wb, 2u * l + 1u) * XQ_BSUM(xb, 2u * l + 1u));
                s1 += lane[l];
            }
            if (TILED != 0u) {
                precise float res = Q6K_D(w, wb) * float(s1);
                tiled = fma_rn(res, xd, tiled);
            } else {
                precise float d = xd * Q6K_D(w, wb);
                [[unroll]] for (uint l = 0u; l < 8u; ++l) acc[l] = fma_rn(d, float(lane[l]), acc[l]);
            }
        } else {
            int prod[4] = int[4](0, 0, 0, 0);
            for (uint j = 0u; j < 8u; ++j) {
                const int sc = K_SC(w, wb, j), mn = K_MIN(w, wb, j);
                [[unroll]] for (uint l = 0u; l < 8u; ++l) lane[l] += sc * dot4(wb, xb, 32u * j + 4u * l);
                prod[j / 2u] += mn * (XQ_BSUM(xb, 2u * j) + XQ_BSUM(xb, 2u * j + 1u));
            }
            if (TILED != 0u) {
                for (uint l = 0u; l < 8u; ++l) s1 += lane[l];
                s2 = prod[0] + prod[1] + prod[2] + prod[3];
                precise float r0 = BLOCK_D(w, wb) * float(s1);
                precise float res = fma_rn(-BLOCK_M(w, wb), float(s2), r0);
                tiled = fma_rn(res, xd, tiled);
            } else {
                precise float dmin = (-xd) * BLOCK_M(w, wb);
                if (QTYPE == WTYPE_Q5_K)
                    summs = fma_rn(dmin, float(prod[0] + prod[1] + prod[2] + prod[3]), summs);
                else
                    [[unroll]] for (uint j = 0u; j < 4u; ++j) accm[j] = fma_rn(dmin, float(prod[j]), accm[j]);
                precise float d = xd * BLOCK_D(w, wb);
                [[unroll]] for (uint l = 0u; l < 8u; ++l) acc[l] = fma_rn(d, float(lane[l]), acc[l]);
            }
        }
    }
    precise float sum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    if (TILED != 0u)
        sum = tiled;
    else if (QTYPE == WTYPE_Q4_K)
        sum = sum + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
    else if (QTYPE == WTYPE_Q5_K)
        sum = sum + summs;
    if (p.has_bias != 0u) sum = sum + bias[p.bias_off + p.n0 + n];
    y[p.y_off + t * p.N + p.n0 + n] = sum;
}
