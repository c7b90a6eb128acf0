#version 450
// x [T, K] f32 to ggml's Q8_0 / Q8_1 activation blocks (the CPU backend's quantize_block32): per 32 elements, with
// amax = max |x|, d = amax / 127, q = round-to-nearest-even(x * (127 / amax)) (0 when amax is 0), f16(d) as f32, and
// Q8_1's s = f16(d * sum of q) as f32. Block i takes 10 words of xq: d, the 32 q as bytes, s.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) buffer Xq { uint xq[]; };
layout(push_constant) uniform Push { uint x_off, blocks; } p;

void main() {
    const uint b = group_index() * 64u + gl_LocalInvocationID.x;
    if (b >= p.blocks) return;
    const uint base = p.x_off + b * 32u;  // a row of K holds K / 32 whole blocks
    float amax = 0.0;
    for (uint i = 0u; i < 32u; ++i) amax = max(amax, abs(x[base + i]));
    const float d = div_rn64(amax, 127.0);
    const float id = amax != 0.0 ? div_rn64(127.0, amax) : 0.0;
    xq[b * 10u] = floatBitsToUint(f16_bits_to_f32(f32_to_f16_bits(d)));
    int sum = 0;
    for (uint w = 0u; w < 8u; ++w) {
        uint word = 0u;
        for (uint j = 0u; j < 4u; ++j) {
            precise float v = x[base + 4u * w + j] * id;
            const int q = int(roundEven(v));
            sum += q;
            word |= (uint(q) & 0xffu) << (8u * j);
        }
        xq[b * 10u + 1u + w] = word;
    }
    precise float s = d * float(sum);
    xq[b * 10u + 9u] = floatBitsToUint(f16_bits_to_f32(f32_to_f16_bits(s)));
}
