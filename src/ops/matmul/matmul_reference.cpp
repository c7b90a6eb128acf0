#include <stdexcept>

#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"

namespace tracelm::reference {

namespace {

template <typename T>
std::vector<double> matmul_rows(std::span<const T> x, std::span<const float> w, int64_t K, std::span<const float> bias) {
    if (K <= 0 || x.size() % K != 0 || w.size() % K != 0) throw std::invalid_argument("reference::matmul: shape mismatch");
    const size_t T_rows = x.size() / K, N = w.size() / K;
    if (!bias.empty() && bias.size() != N) throw std::invalid_argument("reference::matmul: bias length mismatch");
    std::vector<double> out(T_rows * N);
    for (size_t t = 0; t < T_rows; ++t)
        for (size_t n = 0; n < N; ++n) {
            double acc = bias.empty() ? 0.0 : double(bias[n]);
            for (int64_t k = 0; k < K; ++k) acc += double(x[t * K + k]) * double(w[n * K + k]);
            out[t * N + n] = acc;
        }
    return out;
}

}  // namespace

std::vector<double> matmul(std::span<const float> x, std::span<const float> w, int64_t K, std::span<const float> bias) {
    return matmul_rows(x, w, K, bias);
}

std::vector<double> glu_matmul(std::span<const float> gate, std::span<const float> up, Activation act,
                               std::span<const float> w, int64_t K) {
    const std::vector<double> product = glu(gate, up, act);
    return matmul_rows(std::span<const double>(product), w, K, {});
}

}  // namespace tracelm::reference
