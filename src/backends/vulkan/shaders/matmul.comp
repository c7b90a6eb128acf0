#version 450
// y[t,n] = sum_k x[t,k] * w[n,k] (+ bias[n]), w of type WTYPE. One invocation per row of w, which it reads once for
// up to 8 rows of x at a time: no shared memory and no barriers (the cheapest form on lavapipe, and a plain GEMV on
// a GPU).
#include "common.glsl"

layout(constant_id = 0) const uint WTYPE = WTYPE_F32;
layout(local_size_x = 64) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) buffer W { uint w[]; };
layout(binding = 2) buffer Bias { float bias[]; };
layout(binding = 3) buffer Y { float y[]; };
// w_off in 16-bit halves of the bound window; n0, rows: the window's first weight row and its rows (N: all rows, the
// output row stride).
layout(push_constant) uniform Push { uint x_off, w_off, bias_off, y_off, T, K, N, has_bias, n0, rows; } p;

void main() {
    const uint n = group_index() * 64u + gl_LocalInvocationID.x;
    if (n >= p.rows) return;
    const uint row = p.w_off + n * (WTYPE == WTYPE_F32 ? 2u : 1u) * p.K;
    const float b = p.has_bias != 0u ? bias[p.bias_off + p.n0 + n] : 0.0;
    for (uint t0 = 0u; t0 < p.T; t0 += 8u) {
        const uint rows = min(p.T - t0, 8u);
        float sum[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for (uint k = 0u; k < p.K; ++k) {
            const float wk = WEIGHT_AT(w, WTYPE, row, k);
            [[unroll]] for (uint i = 0u; i < 8u; ++i)
                if (i < rows) sum[i] += x[p.x_off + (t0 + i) * p.K + k] * wk;
        }
        [[unroll]] for (uint i = 0u; i < 8u; ++i)
            if (i < rows) y[p.y_off + (t0 + i) * p.N + p.n0 + n] = sum[i] + b;
    }
}
