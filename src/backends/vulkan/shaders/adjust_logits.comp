#version 450
// adjust_logits (ops/sampling/sampling.h), one workgroup per row: invocation 0 adds the logit_bias entries in order
// (an id may repeat), then every invocation masks words of the vocabulary.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) buffer Logits { float x[]; };
layout(binding = 1) buffer Flags { int flags[]; };
layout(binding = 2) buffer Mask { uint mask[]; };
layout(binding = 3) buffer BiasIds { int bias_ids[]; };
layout(binding = 4) buffer BiasValues { float bias_values[]; };
layout(push_constant) uniform Push { uint logits, flags, mask, bias_ids, bias_values, vocab, words, max_bias; } p;

void main() {
    const uint r = group_index(), l = gl_LocalInvocationID.x;
    const int mask_on = flags[p.flags + 2u * r];
    const int n = clamp(flags[p.flags + 2u * r + 1u], 0, int(p.max_bias));
    if (mask_on == 0 && n == 0) return;
    const uint row = p.logits + r * p.vocab;
    if (l == 0u) {
        for (int j = 0; j < n; ++j) {
            const int id = bias_ids[p.bias_ids + r * p.max_bias + uint(j)];
            if (id >= 0 && uint(id) < p.vocab) x[row + uint(id)] += bias_values[p.bias_values + r * p.max_bias + uint(j)];
        }
    }
    memoryBarrierBuffer();
    barrier();
    if (mask_on == 0) return;
    for (uint w = l; w < p.words; w += 256u) {
        const uint bits = mask[p.mask + r * p.words + w];
        if (bits == ~0u) continue;
        for (uint i = 0u, end = min(32u, p.vocab - 32u * w); i < end; ++i)
            if (((bits >> i) & 1u) == 0u) x[row + 32u * w + i] = uintBitsToFloat(0xff800000u);
    }
}
