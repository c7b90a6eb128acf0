#version 450
// In place NeoX RoPE of x [T, heads*head_dim] at positions[t], one workgroup per token, then x *= post_scale.
// Angles as runtime/rope.h: theta_0 = position, theta_{i+1} = theta_i * theta_scale in f32, divided by factors[i]
// (FACTORS). sin and cos are computed here (range reduction and polynomials) rather than by the driver's sin/cos,
// whose Vulkan accuracy (2^-11 absolute) is far below glibc's.
#include "common.glsl"

layout(constant_id = 0) const bool FACTORS = false;
layout(local_size_x = 64) in;
layout(binding = 0) buffer X { float x[]; };
layout(binding = 1) buffer Pos { int pos[]; };
layout(binding = 2) buffer Factors { float factors[]; };
layout(push_constant) uniform Push { uint x_off, pos_off, factors_off, heads, head_dim; float theta_scale, post_scale; } p;

shared float cs[512];  // cos of the head's pairs, then their sin (head_dim <= 512)

// a = k * pi/2 + r by Cody-Waite (pi/2 in three parts, the first two short enough that k times them is exact), then
// Cephes' single-precision polynomials on |r| <= pi/4.
void sin_cos(float a, out float s, out float c) {
    precise float k = round(a * 0.636619772367581343);
    precise float r = ((a - k * 1.5703125) - k * 4.837512969970703125e-4) - k * 7.54978995489188216e-8;
    precise float z = r * r;
    precise float sr = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    precise float cr = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    const int q = int(k) & 3;
    s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
    c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
}

void main() {
    const uint t = group_index(), l = gl_LocalInvocationID.x, half_dim = p.head_dim / 2u;
    for (uint i = l; i < half_dim; i += 64u) {
        precise float theta = float(pos[p.pos_off + t]);
        for (uint j = 0u; j < i; ++j) theta *= p.theta_scale;
        precise float angle = theta;
        if (FACTORS) {
            // Division is not correctly rounded in Vulkan (2.5 ulp); one fma correction makes it so.
            const float f = factors[p.factors_off + i];
            precise float q = theta / f;
            precise float rem = fma(-q, f, theta);
            angle = q + rem / f;
        }
        sin_cos(angle, cs[half_dim + i], cs[i]);
    }
    barrier();
    const uint row = p.x_off + t * p.heads * p.head_dim;
    for (uint e = l; e < p.heads * half_dim; e += 64u) {
        const uint h = e / half_dim, i = e % half_dim, b = row + h * p.head_dim;
        const float x1 = x[b + i], x2 = x[b + i + half_dim], c = cs[i], s = cs[half_dim + i];
        x[b + i] = (x1 * c - x2 * s) * p.post_scale;
        x[b + i + half_dim] = (x2 * c + x1 * s) * p.post_scale;
    }
}
