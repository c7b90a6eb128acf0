#version 450
// out = act(gate) * up, elementwise; ACT: 0 SiLU, 1 GELU (tanh approximation), 2 GELU through ggml's f16 table.
// out may be gate or up (in place).
#include "common.glsl"

layout(constant_id = 0) const uint ACT = 0u;
layout(local_size_x = 256) in;
layout(binding = 0) buffer Gate { float gate[]; };
layout(binding = 1) buffer Up { float up[]; };
layout(binding = 2) buffer Out { float out_[]; };
layout(push_constant) uniform Push { uint gate_off, up_off, out_off, n; } p;

// ggml's GELU as the CPU backend evaluates it (kernels.cpp: gelu_f32), 1 + a*x*x fused as fma(a*x, x, 1).
float gelu(float x) {
    const float a = 0.044715, sqrt_2_over_pi = 0.79788456080286535587989211986876;
    // tanh is exactly +-1 in f32 beyond +-10; clamping keeps a driver's exp-based tanh away from inf / inf.
    precise float inner = fma(a * x, x, 1.0);
    return 0.5 * x * (1.0 + tanh(clamp(sqrt_2_over_pi * x * inner, -10.0, 10.0)));
}

void main() {
    const uint i = group_index() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) return;
    const float g = gate[p.gate_off + i], u = up[p.up_off + i];
    float r;
    if (ACT == 0u) {
        r = g / (1.0 + exp(-g)) * u;
    } else if (ACT == 1u) {
        r = gelu(g) * u;
    } else if (g <= -10.0) {
        r = 0.0;
    } else if (g >= 10.0) {
        r = g * u;
    } else {
        const float gh = f16_bits_to_f32(f32_to_f16_bits(g));
        r = f16_bits_to_f32(f32_to_f16_bits(gelu(gh))) * u;
    }
    out_[p.out_off + i] = r;
}
