#version 450
// ids[r] = argmax(logits[r,:]), one workgroup per row: the lowest index wins ties, NaN never wins, a row of NaN
// gives 0.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) buffer Logits { float logits[]; };
layout(binding = 1) buffer Ids { int ids[]; };
layout(push_constant) uniform Push { uint logits_off, ids_off, cols; } p;

shared float best_v[256];
shared int best_i[256];

// Whether (v, i) beats (bv, bi); bi < 0: nothing yet. Tested on the bits: a NaN compares false, whatever the driver
// assumes about NaN.
bool better(float v, int i, float bv, int bi) {
    if ((floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u || i < 0) return false;
    return bi < 0 || v > bv || (v == bv && i < bi);
}

void main() {
    const uint r = group_index(), l = gl_LocalInvocationID.x;
    float bv = 0.0;
    int bi = -1;
    for (uint c = l; c < p.cols; c += 256u) {
        const float v = logits[p.logits_off + r * p.cols + c];
        if (better(v, int(c), bv, bi)) {
            bv = v;
            bi = int(c);
        }
    }
    best_v[l] = bv;
    best_i[l] = bi;
    barrier();
    [[unroll]] for (uint s = 128u; s > 0u; s >>= 1) {
        if (l < s && better(best_v[l + s], best_i[l + s], best_v[l], best_i[l])) {
            best_v[l] = best_v[l + s];
            best_i[l] = best_i[l + s];
        }
        barrier();
    }
    if (l == 0u) ids[p.ids_off + r] = max(best_i[0], 0);
}
