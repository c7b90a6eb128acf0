// The frequencies of NeoX rotary embeddings, shared by every backend and by the model loader.
#pragma once

#include <span>

namespace tracelm {

// Pair i of a head of head_dim rotates by position * inv_freq[i], where
// inv_freq[i] = theta^(-2i/head_dim) / factors[i]. The factors carry RoPE frequency scaling (Llama 3.1+ "llama3",
// "linear"); without them the frequencies are the plain ones.
//
// The backends round the angles as llama.cpp does, so that they agree with it and with each other bit for bit:
// theta_0 = (float)position, theta_{i+1} = theta_i * rope_theta_scale(theta, head_dim) in f32, and the angle of
// pair i is theta_i / factors[i] (theta_i without factors).
struct RopeSpec {
    float theta = 0.0f;
    std::span<const float> factors;  // empty, or head_dim/2 finite positive divisors
};

// Fills inv_freq[0, head_dim/2) as RopeSpec says. The plain part is 1 / theta^(2i/head_dim) evaluated in f32,
// the recipe of the reference implementations.
void rope_inv_freq(const RopeSpec& rope, int head_dim, float* inv_freq);

// llama.cpp's ratio of consecutive pairs' angles: powf(theta, -2.0f / head_dim).
float rope_theta_scale(float theta, int head_dim);

}  // namespace tracelm
