#version 450
// out[s,:] = x[query_start_loc[s+1]-1, :]: each sequence's last token (a zero row where that is not a row of x).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) buffer Qsl { int qsl[]; };
layout(binding = 2) buffer Out { float out_[]; };
layout(push_constant) uniform Push { uint x_off, qsl_off, out_off, rows, cols; } p;

void main() {
    const uint c = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x, s = gl_WorkGroupID.y;
    if (c >= p.cols) return;
    const int r = qsl[p.qsl_off + s + 1u] - 1;
    out_[p.out_off + s * p.cols + c] = r >= 0 && uint(r) < p.rows ? x[p.x_off + uint(r) * p.cols + c] : 0.0;
}
