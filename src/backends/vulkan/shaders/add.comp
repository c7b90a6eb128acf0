#version 450
// out = a + b, elementwise.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) buffer A { float a[]; };
layout(binding = 1) buffer B { float b[]; };
layout(binding = 2) buffer Out { float out_[]; };
layout(push_constant) uniform Push { uint a_off, b_off, out_off, n; } p;

void main() {
    const uint i = group_index() * 256u + gl_LocalInvocationID.x;
    if (i < p.n) out_[p.out_off + i] = a[p.a_off + i] + b[p.b_off + i];
}
