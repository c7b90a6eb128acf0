// The norm_rope family: rms_norm, layer_norm, add_rms_norm, rope_neox and the fused attention prologue
// qk_norm_rope_kv_write. Their interface and contract are in runtime/backend.h; norm_rope.cpp checks their arguments (the entry points
// every backend goes through), and this header declares the double-precision references the backends are tested
// against (tests/ops/test_norm_rope.cpp), plain loops on host arrays.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tracelm::reference {

// Each row of `cols` values divided by its root mean square (plus eps) and scaled by w (f32 values of a
// f32/bf16/f16 weight).
std::vector<double> rms_norm(std::span<const float> x, int64_t cols, std::span<const float> w, double eps);

// LayerNorm of each row of `cols` values: (x - mean) / sqrt(variance + eps) * w + b, the biased variance.
std::vector<double> layer_norm(std::span<const float> x, int64_t cols, std::span<const float> w,
                               std::span<const float> b, double eps);

// add_rms_norm: sum = x + delta (what x holds afterwards), out = rms_norm(sum).
struct AddRmsNorm {
    std::vector<double> sum, out;
};
AddRmsNorm add_rms_norm(std::span<const float> x, std::span<const float> delta, int64_t cols, std::span<const float> w,
                        double eps);

// NeoX rotary embedding of x [T, heads * head_dim] at positions[t]: in each head, pair (i, i + head_dim/2) rotates by
// positions[t] * theta^(-2i/head_dim) / factors[i] (factors empty: 1), computed in double (the backends round the
// angle as llama.cpp does, runtime/rope.h, so they differ from this by a few f32 ulps of the angle).
std::vector<double> rope_neox(std::span<const float> x, std::span<const int32_t> positions, int heads, int head_dim,
                              double theta, std::span<const float> factors);

// The q and k qk_norm_rope_kv_write leaves: each head's head_dim values rms-normed with q_norm / k_norm (both
// empty: no norm), then rope_neox, q then times q_scale. Its K/V rows then go to the cache as kv_write's reference says (attention.h).
struct QkPrologue {
    std::vector<double> q, k;
};
QkPrologue qk_norm_rope(std::span<const float> q, std::span<const float> k, std::span<const int32_t> positions,
                        int heads, int kv_heads, int head_dim, std::span<const float> q_norm,
                        std::span<const float> k_norm, double eps, double theta, std::span<const float> factors,
                        double q_scale = 1.0);

}  // namespace tracelm::reference
