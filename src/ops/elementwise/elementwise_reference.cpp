#include <cmath>
#include <numbers>
#include <stdexcept>

#include "ops/elementwise/elementwise.h"
#include "runtime/dtype.h"

namespace tracelm::reference {

std::vector<float> embedding(std::span<const int32_t> ids, std::span<const float> table, int64_t cols, float scale) {
    const int64_t rows = static_cast<int64_t>(table.size()) / cols;
    std::vector<float> out(ids.size() * static_cast<size_t>(cols), 0.0f);
    for (size_t t = 0; t < ids.size(); ++t) {
        if (ids[t] < 0 || ids[t] >= rows) continue;
        for (int64_t c = 0; c < cols; ++c) out[t * cols + c] = static_cast<float>(double(table[ids[t] * cols + c]) * scale);
    }
    return out;
}

std::vector<double> add(std::span<const float> a, std::span<const float> b) {
    if (a.size() != b.size()) throw std::invalid_argument("reference::add: sizes differ");
    std::vector<double> out(a.size());
    for (size_t i = 0; i < a.size(); ++i) out[i] = double(a[i]) + double(b[i]);
    return out;
}

namespace {

double gelu_tanh(double x) {
    const double k = std::sqrt(2.0 / std::numbers::pi);
    return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

}  // namespace

std::vector<double> glu(std::span<const float> gate, std::span<const float> up, Activation act) {
    if (gate.size() != up.size()) throw std::invalid_argument("reference::glu: sizes differ");
    std::vector<double> out(gate.size());
    for (size_t i = 0; i < gate.size(); ++i) {
        const double x = gate[i];
        double a = 0.0;
        switch (act) {
            case Activation::Silu: a = x / (1.0 + std::exp(-x)); break;
            case Activation::GeluTanh: a = gelu_tanh(x); break;
            case Activation::GeluTanhF16:
                a = x <= -10.0 ? 0.0
                    : x >= 10.0 ? x
                                : f16_to_f32(f32_to_f16(static_cast<float>(gelu_tanh(f16_to_f32(f32_to_f16(gate[i]))))));
                break;
        }
        out[i] = a * up[i];
    }
    return out;
}

std::vector<float> gather_last(std::span<const float> x, int64_t cols, std::span<const int32_t> query_start_loc) {
    const int64_t rows = static_cast<int64_t>(x.size()) / cols;
    const size_t seqs = query_start_loc.empty() ? 0 : query_start_loc.size() - 1;
    std::vector<float> out(seqs * static_cast<size_t>(cols), 0.0f);
    for (size_t s = 0; s < seqs; ++s) {
        const int64_t r = int64_t{query_start_loc[s + 1]} - 1;
        if (r < 0 || r >= rows) continue;
        for (int64_t c = 0; c < cols; ++c) out[s * cols + c] = x[r * cols + c];
    }
    return out;
}

}  // namespace tracelm::reference
