#version 450
// out[r,:] = x[r,:] / sqrt(mean(x[r,:]^2) + eps) * w, one workgroup per row; with ADD, x[r,:] += delta[r,:] first
// (written back to x: add_rms_norm). w's type is WTYPE. out may be x (in place): each invocation reads its own
// elements before it writes them.
#include "common.glsl"

layout(constant_id = 0) const uint WTYPE = WTYPE_F32;
layout(constant_id = 1) const bool ADD = false;
layout(local_size_x = 256) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) buffer Delta { float delta[]; };
layout(binding = 2) buffer W { uint w[]; };
layout(binding = 3) buffer Out { float out_[]; };
layout(push_constant) uniform Push { uint x_off, delta_off, w_off, out_off, cols; float eps; } p;

shared float partial[256];

void main() {
    const uint r = group_index(), l = gl_LocalInvocationID.x;
    const uint xr = p.x_off + r * p.cols, orow = p.out_off + r * p.cols;
    float sum = 0.0;
    for (uint i = l; i < p.cols; i += 256u) {
        float v = x[xr + i];
        if (ADD) {
            v += delta[p.delta_off + r * p.cols + i];
            x[xr + i] = v;
        }
        sum += v * v;
    }
    partial[l] = sum;
    barrier();
    [[unroll]] for (uint s = 128u; s > 0u; s >>= 1) {
        if (l < s) partial[l] += partial[l + s];
        barrier();
    }
    const float scale = 1.0 / sqrt(partial[0] / float(p.cols) + p.eps);
    for (uint i = l; i < p.cols; i += 256u) out_[orow + i] = x[xr + i] * scale * WEIGHT_AT(w, WTYPE, p.w_off, i);
}
