// Plain C++ kernels: the fallback for CPUs without AVX2. Loops are written over 8 independent lanes so the
// compiler can vectorise them without reassociating floating-point sums (which it may not do, and which
// would break determinism).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kernels_internal.h"
#include "ops/ggml_math.h"

namespace tracelm::cpu::portable {
namespace {

// Canonical K block: a matmul output is the in-order sum of 8-lane partial dot products over blocks of
// this many k, so it never depends on how rows or tokens were grouped.
constexpr int64_t kBlock = 256;

void to_f32(const void* src, DType dt, int64_t n, float* out) {
    if (dt == DType::F32) {
        std::memcpy(out, src, static_cast<size_t>(n) * 4);
        return;
    }
    const auto* h = static_cast<const uint16_t*>(src);
    if (dt == DType::BF16) {
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
    } else {
        for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
    }
}

float sum8(const float* a) { return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); }

float block_dot(const float* x, const float* w, int64_t len) {
    float acc[8] = {};
    int64_t k = 0;
    for (; k + 8 <= len; k += 8)
        for (int j = 0; j < 8; ++j) acc[j] += x[k + j] * w[k + j];
    for (int j = 0; k + j < len; ++j) acc[j] += x[k + j] * w[k + j];
    return sum8(acc);
}

void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            int64_t n0, int64_t n1) {
    const size_t esize = dtype_size(wt);
    // Each weight row is converted once and used for every token, so the weights stream once per call.
    float* row = wt == DType::F32 ? nullptr : static_cast<float*>(detail::scratch(static_cast<size_t>(K) * 4));
    for (int64_t n = n0; n < n1; ++n) {
        const void* src = static_cast<const char*>(w) + static_cast<size_t>(n * K) * esize;
        const float* wr = static_cast<const float*>(src);
        if (row != nullptr) {
            to_f32(src, wt, K, row);
            wr = row;
        }
        for (int64_t t = 0; t < T; ++t) {
            const float* xr = x + t * K;
            float s = 0.0f;
            for (int64_t k0 = 0; k0 < K; k0 += kBlock)
                s += block_dot(xr + k0, wr + k0, K - k0 < kBlock ? K - k0 : kBlock);
            y[t * N + n] = bias != nullptr ? s + bias[n] : s;
        }
    }
}

void add(const float* a, const float* b, float* out, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
}

// Without FMA hardware std::fma is slow (a library call, emulated), but gives ggml's bits.
void silu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t n_vec) {
    int64_t i = 0;
    for (; i < n_vec; ++i) out[i] = gate[i] / (1.0f + ggml::v_expf(0.0f - gate[i])) * up[i];
    for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// ggml's f32 MUL_MAT orders (kernels.h), lane by lane: the x86 kernels' operations in the same order.
float ggml_f32_dot(const float* x, const float* w, int64_t K, GgmlDot order) {
    if (order == GgmlDot::Tinyblas) {
        float acc[8] = {};
        for (int64_t i = 0; i < K; i += 8)
            for (int l = 0; l < 8; ++l) acc[l] = std::fma(w[i + l], x[i + l], acc[l]);
        const float t0 = acc[4] + acc[0], t1 = acc[5] + acc[1], t2 = acc[6] + acc[2], t3 = acc[7] + acc[3];
        return (t0 + t2) + (t1 + t3);
    }
    float acc[4][8] = {};
    const int64_t np = K & ~int64_t{31};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 8; ++l) acc[j][l] = std::fma(w[i + 8 * j + l], x[i + 8 * j + l], acc[j][l]);
    float s[8];
    for (int l = 0; l < 8; ++l) s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    // Two hadds of t = lo + hi: (t0 + t1) + (t2 + t3).
    const float t0 = s[0] + s[4], t1 = s[1] + s[5], t2 = s[2] + s[6], t3 = s[3] + s[7];
    float sum = (t0 + t1) + (t2 + t3);
    for (int64_t i = np; i < K; ++i) {
        const float term = x[i] * w[i];
        sum += term;
    }
    return sum;
}

void matmul_f32_ggml(const float* x, int64_t T, int64_t K, const float* w, float* y, int64_t N, int64_t n0,
                     int64_t n1, GgmlDot order) {
    for (int64_t t = 0; t < T; ++t)
        for (int64_t n = n0; n < n1; ++n) y[t * N + n] = ggml_f32_dot(x + t * K, w + n * K, K, order);
}

float dot_f32(const float* a, const float* b, int64_t n) {
    float acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i + j < n; ++j) acc[j] += a[i + j] * b[i + j];
    return sum8(acc);
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void rope_rotate(float* x, int64_t heads, int64_t head_dim, const float* cs) {
    const int64_t half = head_dim / 2;
    for (int64_t h = 0; h < heads; ++h) {
        float* v = x + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
            const float c = cs[i], s = cs[half + i], x0 = v[i], x1 = v[half + i];
            v[i] = std::fma(x0, c, -(x1 * s));
            v[half + i] = std::fma(x0, s, x1 * c);
        }
    }
}

double read_sweep(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    uint64_t acc[4] = {};
    size_t i = 0;
    for (; i + 32 <= bytes; i += 32) {
        for (int j = 0; j < 4; ++j) {
            uint64_t v;
            std::memcpy(&v, p + i + 8 * j, 8);
            acc[j] += v;
        }
    }
    for (; i < bytes; ++i) acc[0] += p[i];
    return static_cast<double>(acc[0] + acc[1] + acc[2] + acc[3]);
}

void gelu_mul_f16(const float* table, const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        out[i] = x <= -10.0f ? 0.0f : x >= 10.0f ? x * up[i] : table[f32_to_f16(x)] * up[i];
    }
}

}  // namespace
}  // namespace tracelm::cpu::portable

namespace tracelm::cpu {


// Declared extern in kernels_internal.h, so this const keeps external linkage.
const KernelTable detail::portable_kernels = {
    Isa::Portable,     portable::matmul,   portable::add,         portable::silu_mul,   portable::gelu_mul_f16, portable::dot_f32,
    portable::matmul_f32_ggml, portable::axpy_f32, portable::rope_rotate, portable::to_f32, portable::read_sweep, &detail::portable_quant,
    &detail::portable_f16_attention,
};

}  // namespace tracelm::cpu
