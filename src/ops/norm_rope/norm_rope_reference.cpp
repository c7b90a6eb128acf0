#include <cmath>
#include <stdexcept>

#include "ops/norm_rope/norm_rope.h"

namespace tracelm::reference {

namespace {

template <typename T>
std::vector<double> rms_norm_rows(std::span<const T> x, int64_t cols, std::span<const float> w, double eps) {
    if (cols <= 0 || x.size() % cols != 0 || static_cast<int64_t>(w.size()) != cols)
        throw std::invalid_argument("reference::rms_norm: shape mismatch");
    std::vector<double> out(x.size());
    for (size_t r = 0; r < x.size() / cols; ++r) {
        double ss = 0.0;
        for (int64_t c = 0; c < cols; ++c) ss += double(x[r * cols + c]) * double(x[r * cols + c]);
        const double inv = 1.0 / std::sqrt(ss / double(cols) + eps);
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = double(x[r * cols + c]) * inv * double(w[c]);
    }
    return out;
}

template <typename T>
std::vector<double> rope_rows(std::span<const T> x, std::span<const int32_t> positions, int heads, int head_dim,
                              double theta, std::span<const float> factors) {
    const int half = head_dim / 2;
    const size_t width = static_cast<size_t>(heads) * head_dim;
    if (x.size() != positions.size() * width || (!factors.empty() && factors.size() != static_cast<size_t>(half)))
        throw std::invalid_argument("reference::rope_neox: shape mismatch");
    std::vector<double> out(x.begin(), x.end());
    for (size_t t = 0; t < positions.size(); ++t)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < half; ++i) {
                const double angle = positions[t] * std::pow(theta, -2.0 * i / head_dim) /
                                     (factors.empty() ? 1.0 : double(factors[i]));
                const size_t b = t * width + static_cast<size_t>(h) * head_dim;
                const double x1 = double(x[b + i]), x2 = double(x[b + i + half]);
                out[b + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
                out[b + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
            }
    return out;
}

}  // namespace

std::vector<double> rms_norm(std::span<const float> x, int64_t cols, std::span<const float> w, double eps) {
    return rms_norm_rows(x, cols, w, eps);
}

std::vector<double> layer_norm(std::span<const float> x, int64_t cols, std::span<const float> w,
                               std::span<const float> b, double eps) {
    if (cols <= 0 || x.size() % cols != 0 || static_cast<int64_t>(w.size()) != cols ||
        static_cast<int64_t>(b.size()) != cols)
        throw std::invalid_argument("reference::layer_norm: shape mismatch");
    std::vector<double> out(x.size());
    for (size_t r = 0; r < x.size() / cols; ++r) {
        const float* row = x.data() + r * cols;
        double mean = 0.0, var = 0.0;
        for (int64_t c = 0; c < cols; ++c) mean += row[c];
        mean /= double(cols);
        for (int64_t c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
        const double inv = 1.0 / std::sqrt(var / double(cols) + eps);
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = (row[c] - mean) * inv * double(w[c]) + double(b[c]);
    }
    return out;
}

AddRmsNorm add_rms_norm(std::span<const float> x, std::span<const float> delta, int64_t cols, std::span<const float> w,
                        double eps) {
    if (x.size() != delta.size()) throw std::invalid_argument("reference::add_rms_norm: sizes differ");
    AddRmsNorm r;
    r.sum.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) r.sum[i] = double(x[i]) + double(delta[i]);
    r.out = rms_norm_rows(std::span<const double>(r.sum), cols, w, eps);
    return r;
}

std::vector<double> rope_neox(std::span<const float> x, std::span<const int32_t> positions, int heads, int head_dim,
                              double theta, std::span<const float> factors) {
    return rope_rows(x, positions, heads, head_dim, theta, factors);
}

QkPrologue qk_norm_rope(std::span<const float> q, std::span<const float> k, std::span<const int32_t> positions,
                        int heads, int kv_heads, int head_dim, std::span<const float> q_norm,
                        std::span<const float> k_norm, double eps, double theta, std::span<const float> factors,
                        double q_scale) {
    auto one = [&](std::span<const float> x, int n_heads, std::span<const float> norm) {
        if (norm.empty()) return rope_rows(x, positions, n_heads, head_dim, theta, factors);
        const std::vector<double> normed = rms_norm_rows(x, head_dim, norm, eps);
        return rope_rows(std::span<const double>(normed), positions, n_heads, head_dim, theta, factors);
    };
    QkPrologue out{one(q, heads, q_norm), one(k, kv_heads, k_norm)};
    for (double& v : out.q) v *= q_scale;
    return out;
}

}  // namespace tracelm::reference
