#version 450
// x [T, K] f32 to ggml's Q8_K activation blocks (the CPU backend's quantize_block256, quant.h): per 256 elements,
// with max = the first x of the largest |x|, iscale = -127 / max, q = min(127, round-to-nearest-even(iscale * x)),
// d = 1 / iscale (all 0 for an all-zero block) and the sums of each 16 q. Block i takes 81 words of xq: d, the 16
// sums, the 256 q as bytes.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) buffer Xq { uint xq[]; };
layout(push_constant) uniform Push { uint x_off, blocks; } p;

void main() {
    const uint b = group_index() * 64u + gl_LocalInvocationID.x;
    if (b >= p.blocks) return;
    const uint base = p.x_off + b * 256u, o = b * 81u;  // a row of K holds K / 256 whole blocks
    float amax = 0.0, mx = 0.0;
    for (uint i = 0u; i < 256u; ++i) {
        const float v = x[base + i];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    const float iscale = amax != 0.0 ? div_rn64(-127.0, mx) : 0.0;
    xq[o] = floatBitsToUint(amax != 0.0 ? div_rn64(1.0, iscale) : 0.0);
    for (uint g = 0u; g < 16u; ++g) {
        int sum = 0;
        for (uint w = 0u; w < 4u; ++w) {
            uint word = 0u;
            for (uint j = 0u; j < 4u; ++j) {
                precise float v = iscale * x[base + 16u * g + 4u * w + j];
                const int q = min(127, int(roundEven(v)));
                sum += q;
                word |= (uint(q) & 0xffu) << (8u * j);
            }
            xq[o + 17u + 4u * g + w] = word;
        }
        xq[o + 1u + g] = uint(sum);
    }
}
