#version 450
// y[t,n] = sum_k x[t,k] * w[n,k] (+ bias[n]), w of type WTYPE. A workgroup takes 4 rows of w, 64 invocations each,
// for every t: decode's matrix-vector products read each weight once per row of x.
#include "common.glsl"

layout(constant_id = 0) const uint WTYPE = WTYPE_F32;
layout(local_size_x = 64, local_size_y = 4) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) buffer W { uint w[]; };
layout(binding = 2) buffer Bias { float bias[]; };
layout(binding = 3) buffer Y { float y[]; };
layout(push_constant) uniform Push { uint x_off, w_off, bias_off, y_off, T, K, N, has_bias; } p;

shared float partial[4][64];

void main() {
    const uint l = gl_LocalInvocationID.x, j = gl_LocalInvocationID.y;
    const uint n = group_index() * 4u + j;
    const uint row = p.w_off + n * (WTYPE == WTYPE_F32 ? 2u : 1u) * p.K;
    for (uint t = 0u; t < p.T; ++t) {
        float sum = 0.0;
        if (n < p.N)
            for (uint k = l; k < p.K; k += 64u) sum += x[p.x_off + t * p.K + k] * WEIGHT_AT(w, WTYPE, row, k);
        partial[j][l] = sum;
        barrier();
        [[unroll]] for (uint s = 32u; s > 0u; s >>= 1) {
            if (l < s) partial[j][l] += partial[j][l + s];
            barrier();
        }
        if (l == 0u && n < p.N) y[p.y_off + t * p.N + n] = partial[j][0] + (p.has_bias != 0u ? bias[p.bias_off + n] : 0.0);
        barrier();  // partial is reused by the next t
    }
}
