#version 450
// y[t,n] = w[n,:] . x[t,:] (+ bias[n]) for GGML's 32-element block weights (QTYPE: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
// against x in Q8_0 / Q8_1 blocks (quantize_q8_0.comp), in the float operations and order of ggml's AVX2 vec_dot
// (backends/cpu/kernels/quant.h): per block, in k order, d = f(w.d) * x.d and acc[i] = fma(d, lane[i], acc[i]) for the
// 8 exact integer dot products of elements 4i..4i+3 (Q4_1, Q5_1: summs = fma(f(w.m), x.s, summs)); then a fixed
// pairwise sum of acc, summs and the bias. One invocation per output, so the order is the CPU's and the result the
// same bits. Needs shaderFloat64 (for the fma).
#include "common.glsl"

layout(constant_id = 0) const uint QTYPE = WTYPE_Q8_0;
layout(local_size_x = 64) in;
layout(binding = 0) buffer Xq { uint xq[]; };
layout(binding = 1) buffer W { uint w[]; };
layout(binding = 2) buffer Bias { float bias[]; };
layout(binding = 3) buffer Y { float y[]; };
// w_off in bytes (from the bound window); n0, rows: the window's first weight row and its rows (N: all rows, the
// output row stride); a weight row is K / 32 blocks.
layout(push_constant) uniform Push { uint w_off, bias_off, y_off, K, N, has_bias, n0, rows; } p;

// fma(a, b, c) rounded once: Vulkan's fma() may round twice, but a * b (24 by at most 24 bits) is exact in f64, and
// its sum with c rounds to f64 and then f32 as fma rounds once (but in rare double ties).
float fma_rn(float a, float b, float c) { return float(double(a) * double(b) + double(c)); }

void main() {
    const uint n = gl_WorkGroupID.x * 64u + gl_LocalInvocationID.x, t = gl_WorkGroupID.y;
    if (n >= p.rows) return;
    const uint blocks = p.K / 32u;
    precise float acc[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    precise float summs = 0.0;
    for (uint b = 0u; b < blocks; ++b) {
        const uint wb = p.w_off + (n * blocks + b) * block_bytes(QTYPE), xb = (t * blocks + b) * 10u;
        precise float d = BLOCK_D(w, wb) * uintBitsToFloat(xq[xb]);
        [[unroll]] for (uint i = 0u; i < 8u; ++i) {
            const uint xw = xq[xb + 1u + i];
            int lane = 0;
            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                const uint e = 4u * i + j;
                lane += BLOCK_Q(w, QTYPE, wb, e) * bitfieldExtract(int(xw), int(8u * j), 8);
            }
            acc[i] = fma_rn(d, float(lane), acc[i]);
        }
        if (block_has_m(QTYPE)) summs = fma_rn(BLOCK_M(w, wb), uintBitsToFloat(xq[xb + 9u]), summs);
    }
    precise float sum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    if (block_has_m(QTYPE)) sum = sum + summs;
    if (p.has_bias != 0u) sum = sum + bias[p.bias_off + p.n0 + n];
    y[p.y_off + t * p.N + p.n0 + n] = sum;
}
