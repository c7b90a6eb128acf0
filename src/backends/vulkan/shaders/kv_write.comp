#version 450
// Row t of k and v goes to row slots[t] of k_cache and v_cache (skipped outside [0, slots)); F16: the caches hold
// f16, rounded to nearest even, and each invocation writes one whole word (two values) so none races another.
#include "common.glsl"

layout(constant_id = 0) const bool F16 = false;
layout(local_size_x = 256) in;
layout(binding = 0) buffer K { float k[]; };
layout(binding = 1) buffer V { float v[]; };
layout(binding = 2) buffer Slots { int slots[]; };
layout(binding = 3) buffer KCache { uint kc[]; };
layout(binding = 4) buffer VCache { uint vc[]; };
// Cache offsets in words; cols is even for F16.
layout(push_constant) uniform Push { uint k_off, v_off, slots_off, kc_off, vc_off, cols, slot_count; } p;

void main() {
    const uint w = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x, t = gl_WorkGroupID.y;
    const uint row_words = F16 ? p.cols / 2u : p.cols;
    if (w >= row_words) return;
    const int slot = slots[p.slots_off + t];
    if (slot < 0 || uint(slot) >= p.slot_count) return;
    const uint src = t * p.cols, dst = uint(slot) * row_words + w;
    if (F16) {
        const uint c = 2u * w;
        kc[p.kc_off + dst] = f32_to_f16_bits(k[p.k_off + src + c]) | (f32_to_f16_bits(k[p.k_off + src + c + 1u]) << 16);
        vc[p.vc_off + dst] = f32_to_f16_bits(v[p.v_off + src + c]) | (f32_to_f16_bits(v[p.v_off + src + c + 1u]) << 16);
    } else {
        kc[p.kc_off + dst] = floatBitsToUint(k[p.k_off + src + w]);
        vc[p.vc_off + dst] = floatBitsToUint(v[p.v_off + src + w]);
    }
}
