// What llama.cpp's CPU backend (ggml-cpu as vendored by llama-cpp-python 0.3.36, built for AVX2+FMA+F16C) computes,
// float operation by float operation, for the ops of a Llama-family forward; and a reader for the tensors
// scripts/dump_llamacpp_tensors.py captured from it. tests/backends/test_ggml_conformance.cpp checks these references against
// the captured tensors bit for bit, so they are an executable description of ggml's numerics (docs/ggml-numerics.md
// explains them): where tracelm's kernels differ, this is what they would have to compute.
//
// Everything here is plain scalar C++ with explicit std::fma where ggml fuses (the tests are built without
// -ffp-contract, so a*b+c is never fused behind our back) and with each SIMD reduction spelled out lane by lane.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace tracelm::ggml_ref {

// ---- the captured tensors ----

struct Captured {
    std::string dtype;           // numpy's name: float32, float16, int32, uint8
    std::vector<int64_t> shape;  // outermost first
    std::vector<unsigned char> bytes;

    int64_t numel() const {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return n;
    }
    std::vector<float> f32() const {
        std::vector<float> out(static_cast<size_t>(numel()));
        if (dtype == "float32") {
            std::memcpy(out.data(), bytes.data(), out.size() * 4);
        } else if (dtype == "float16") {
            for (size_t i = 0; i < out.size(); ++i) {
                uint16_t h;
                std::memcpy(&h, bytes.data() + 2 * i, 2);
                out[i] = f16_to_f32(h);
            }
        } else {
            throw std::runtime_error("captured tensor of dtype " + dtype + " is not float");
        }
        return out;
    }
    std::vector<uint16_t> f16() const {
        if (dtype != "float16") throw std::runtime_error("captured tensor of dtype " + dtype + " is not float16");
        std::vector<uint16_t> out(static_cast<size_t>(numel()));
        std::memcpy(out.data(), bytes.data(), out.size() * 2);
        return out;
    }
    std::vector<int32_t> i32() const {
        if (dtype != "int32") throw std::runtime_error("captured tensor of dtype " + dtype + " is not int32");
        std::vector<int32_t> out(static_cast<size_t>(numel()));
        std::memcpy(out.data(), bytes.data(), out.size() * 4);
        return out;
    }
};

// A folder written by dump_llamacpp_tensors.py --fixture: manifest.json plus one raw file per tensor.
class Fixture {
   public:
    explicit Fixture(std::string dir) : dir_(std::move(dir)) {
        std::ifstream f(dir_ + "/manifest.json");
        if (!f) throw std::runtime_error("missing " + dir_ + "/manifest.json");
        manifest_ = nlohmann::json::parse(f);
    }
    bool has(const std::string& key) const { return manifest_["tensors"].contains(key); }
    Captured get(const std::string& key) const {
        if (!has(key)) throw std::runtime_error("fixture " + dir_ + " has no tensor " + key);
        const auto& m = manifest_["tensors"][key];
        Captured c{m["dtype"].get<std::string>(), m["shape"].get<std::vector<int64_t>>(), {}};
        std::ifstream in(dir_ + "/" + m["file"].get<std::string>(), std::ios::binary);
        c.bytes.assign(std::istreambuf_iterator<char>(in), {});
        const size_t esize = c.dtype == "float16" ? 2 : c.dtype == "uint8" ? 1 : 4;
        if (c.bytes.size() != static_cast<size_t>(c.numel()) * esize)
            throw std::runtime_error("fixture tensor " + key + " has the wrong size");
        return c;
    }

   private:
    std::string dir_;
    nlohmann::json manifest_;
};

// ---- comparing ----

// |a - b| in units in the last place of the larger magnitude (0 for identical bits, and for +0 vs -0).
inline double ulps(float a, float b) {
    if (a == b) return 0.0;
    const float m = std::max(std::fabs(a), std::fabs(b));
    const float ulp = std::nextafter(m, INFINITY) - m;
    return std::fabs(static_cast<double>(a) - static_cast<double>(b)) / ulp;
}

struct Diff {
    int64_t mismatches = 0;  // elements whose values differ (+0 and -0 count as equal)
    double max_ulps = 0.0;   // the largest difference in ulps of the larger magnitude
    double max_abs = 0.0;
    int64_t n = 0;
};

inline Diff compare(const float* got, const float* want, int64_t n) {
    Diff d;
    d.n = n;
    for (int64_t i = 0; i < n; ++i) {
        if (got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
        ++d.mismatches;
        d.max_ulps = std::max(d.max_ulps, ulps(got[i], want[i]));
        d.max_abs = std::max(d.max_abs, std::fabs(static_cast<double>(got[i]) - want[i]));
    }
    return d;
}
inline Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) throw std::runtime_error("compare: size mismatch");
    return compare(got.data(), want.data(), static_cast<int64_t>(got.size()));
}

// ---- the layout llama.cpp uses for q/k of llama-architecture GGUFs ----

// GGUF's llama q/k rows are permuted so that rotary pairs are adjacent (element 2i and 2i+1 of a head); tracelm
// un-permutes them at load, where pair i is (i, i + head_dim/2) (NeoX). Element `e` of a head in tracelm's order is
// element neox_to_gguf(e) in llama.cpp's.
inline int neox_to_gguf(int e, int head_dim) {
    const int half = head_dim / 2;
    return e < half ? 2 * e : 2 * (e - half) + 1;
}
// Rows of [T, heads*head_dim] from llama.cpp's (GGUF) element order to tracelm's (f32 values or f16 bits).
template <class E>
std::vector<E> gguf_rows_to_neox(const std::vector<E>& x, int64_t T, int heads, int head_dim) {
    std::vector<E> out(x.size());
    for (int64_t t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h)
            for (int e = 0; e < head_dim; ++e) {
                const int64_t base = (t * heads + h) * head_dim;
                out[static_cast<size_t>(base + e)] = x[static_cast<size_t>(base + neox_to_gguf(e, head_dim))];
            }
    return out;
}

// ---- ops ----

// RMS_NORM (ops.cpp ggml_compute_forward_rms_norm_f32): the squares are rounded to f32, summed in double in index
// order; mean = (float)(sum / n); scale = 1.0f / sqrtf(mean + eps); y = x * scale (ggml_vec_scale_f32: one multiply).
// The weight is a separate MUL node: out = y * w.
inline void rms_norm(const float* x, int64_t n, float eps, float* y) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

// ROPE, mode 0 ("normal": pairs (2i, 2i+1)), no frequency factors, freq_scale 1, ext_factor 0, attn_factor 1
// (ops.cpp ggml_rope_cache_init / rope_yarn / rotate_pairs): the angle of pair i is theta_i with theta_0 = (float)pos
// and theta_{i+1} = theta_i * theta_scale in f32, theta_scale = powf(freq_base, -2.0f / n_dims); cos/sin are glibc's
// cosf/sinf (times mscale = 1); GCC contracts the rotation into x0*cos - x1*sin = fma(x0, cos, -(x1*sin)) and
// x0*sin + x1*cos = fma(x0, sin, x1*cos). x: [rows of heads*head_dim] at positions pos[row], in place.
inline void rope_normal(float* x, const int32_t* pos, int64_t rows, int heads, int head_dim, float freq_base) {
    const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(head_dim));
    std::vector<float> cache(static_cast<size_t>(head_dim));
    for (int64_t r = 0; r < rows; ++r) {
        float theta = static_cast<float>(pos[r]);
        for (int i0 = 0; i0 < head_dim; i0 += 2) {
            cache[static_cast<size_t>(i0)] = std::cos(theta);
            cache[static_cast<size_t>(i0 + 1)] = std::sin(theta);
            theta *= theta_scale;
        }
        for (int h = 0; h < heads; ++h) {
            float* v = x + (r * heads + h) * head_dim;
            for (int i0 = 0; i0 < head_dim; i0 += 2) {
                const float c = cache[static_cast<size_t>(i0)], s = cache[static_cast<size_t>(i0 + 1)];
                const float x0 = v[i0], x1 = v[i0 + 1];
                v[i0] = std::fma(x0, c, -(x1 * s));
                v[i0 + 1] = std::fma(x0, s, x1 * c);
            }
        }
    }
}

// The f32 -> f16 conversion of SET_ROWS into the K/V cache and of MUL_MAT's src1 when src0 is f16
// (F16C _mm256_cvtps_ph / _cvtss_sh with round to nearest even).
inline uint16_t to_f16(float x) { return f32_to_f16(x); }

// Lane sum of an 8-lane f32 accumulator as GGML_F32x8_REDUCE ends (simd-mappings.h, AVX): t = lo + hi, then two
// _mm_hadd_ps: (t0 + t1) + (t2 + t3).
inline float reduce8_hadd(const float* l) {
    const float t0 = l[0] + l[4], t1 = l[1] + l[5], t2 = l[2] + l[6], t3 = l[3] + l[7];
    return (t0 + t1) + (t2 + t3);
}

// ggml_vec_dot_f16 (vec.cpp, AVX2+F16C: GGML_F16_STEP 32, GGML_F16_EPR 8): 4 accumulators of 8 lanes; elements
// [i + 8j, i + 8j + 8) of every 32 go to accumulator j by FMA (operands widened to f32 exactly); then
// GGML_F32x8_REDUCE: acc0 += acc2, acc1 += acc3, acc0 += acc1 (lanewise), then reduce8_hadd. A tail beyond the last
// multiple of 32 adds x*y in double (ggml_float) after the reduction.
inline float vec_dot_f16(int64_t n, const uint16_t* x, const uint16_t* y) {
    float acc[4][8] = {};
    const int64_t np = n & ~int64_t{31};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 8; ++l) {
                const int64_t k = i + 8 * j + l;
                acc[j][l] = std::fma(f16_to_f32(x[k]), f16_to_f32(y[k]), acc[j][l]);
            }
    float s[8];
    for (int l = 0; l < 8; ++l) {
        const float a = acc[0][l] + acc[2][l], b = acc[1][l] + acc[3][l];
        s[l] = a + b;
    }
    double sum = reduce8_hadd(s);
    for (int64_t k = np; k < n; ++k) sum += static_cast<double>(f16_to_f32(x[k]) * f16_to_f32(y[k]));
    return static_cast<float>(sum);
}

// llamafile's tinyBLAS (sgemm.cpp, AVX2+F16C, f16 x f16 -> f32), one output element: one 8-lane accumulator fed by
// FMA over k in steps of 8 (operands widened to f32 exactly), then hsum: t = hi + lo, (t0 + t2) + (t1 + t3)
// (_mm_movehl_ps, _mm_movehdup_ps). n must be a multiple of 8 (tinyBLAS declines the call otherwise).
inline float tinyblas_dot_f16(int64_t n, const uint16_t* x, const uint16_t* y) {
    float acc[8] = {};
    for (int64_t i = 0; i < n; i += 8)
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(f16_to_f32(x[i + l]), f16_to_f32(y[i + l]), acc[l]);
    const float t0 = acc[4] + acc[0], t1 = acc[5] + acc[1], t2 = acc[6] + acc[2], t3 = acc[7] + acc[3];
    return (t0 + t2) + (t1 + t3);
}

// ggml_vec_dot_f32 (vec.cpp, AVX2+FMA: GGML_F32_STEP 32, GGML_F32_EPR 8): as vec_dot_f16 on f32 operands, except
// that the tail beyond the last multiple of 32 adds x*y (rounded) to the f32 sum.
inline float vec_dot_f32(int64_t n, const float* x, const float* y) {
    float acc[4][8] = {};
    const int64_t np = n & ~int64_t{31};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 8; ++l) acc[j][l] = std::fma(x[i + 8 * j + l], y[i + 8 * j + l], acc[j][l]);
    float s[8];
    for (int l = 0; l < 8; ++l) s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    float sum = reduce8_hadd(s);
    for (int64_t k = np; k < n; ++k) {
        const float p = x[k] * y[k];
        sum += p;
    }
    return sum;
}

// llamafile's tinyBLAS<8, __m256, __m256, float, float, float> (sgemm.cpp, AVX2), one output element: as
// tinyblas_dot_f16 on f32 operands. n must be a multiple of 8.
inline float tinyblas_dot_f32(int64_t n, const float* x, const float* y) {
    float acc[8] = {};
    for (int64_t i = 0; i < n; i += 8)
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(x[i + l], y[i + l], acc[l]);
    const float t0 = acc[4] + acc[0], t1 = acc[5] + acc[1], t2 = acc[6] + acc[2], t3 = acc[7] + acc[3];
    return (t0 + t2) + (t1 + t3);
}

// ggml_v_expf (vec.h, AVX2+FMA), one lane: ARM's optimized-routines expf, max error 1.45 ulp + 0.5.
inline float v_expf(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    const uint32_t e = std::bit_cast<uint32_t>(z) << 23;
    const float k = std::bit_cast<float>(e + std::bit_cast<uint32_t>(1.0f));
    const bool c = std::fabs(n) > 126.0f;
    const float u = b * b;
    const float j =
        std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                 u, 0x1.ffffecp-1f * b);
    if (!c) return std::fma(j, k, k);
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = std::bit_cast<float>(g + 0x7f000000u);
    const float s2 = std::bit_cast<float>(e - g);
    if (std::fabs(n) > 192.0f) return s1 * s1;
    return std::fma(s2, j, s2) * s1;
}

// SOFT_MAX with a mask and no sinks/ALiBi (ops.cpp ggml_compute_forward_soft_max_f32, vec.cpp
// ggml_vec_soft_max_f32, AVX2): w = x * scale (ggml_vec_scale_f32), w += mask; max over w; then per 8 elements
// p = ggml_v_expf(w - max), stored, and their lane sum ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)) (_mm_movehl_ps /
// _mm_movehdup_ps) is added in f32 to a double total; a tail of n % 8 uses expf and adds each value in double;
// then p *= (float)(1.0 / total). Masked (-inf) entries give exactly 0.
inline void soft_max(const float* x, const float* mask, int64_t n, float scale, float* out) {
    std::vector<float> w(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i)] = x[i] * scale + (mask ? mask[i] : 0.0f);
    float max = -INFINITY;
    for (float v : w) max = std::max(max, v);
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 7 < n; i += 8) {
        float p[8];
        for (int l = 0; l < 8; ++l) out[i + l] = p[l] = v_expf(w[static_cast<size_t>(i + l)] - max);
        const float t0 = p[4] + p[0], t1 = p[5] + p[1], t2 = p[6] + p[2], t3 = p[7] + p[3];
        sum += static_cast<double>((t0 + t2) + (t1 + t3));
    }
    for (; i < n; ++i) {
        const float v = std::exp(w[static_cast<size_t>(i)] - max);
        sum += static_cast<double>(v);
        out[i] = v;
    }
    sum = 1.0 / sum;
    const auto inv = static_cast<float>(sum);
    for (int64_t k = 0; k < n; ++k) out[k] *= inv;
}

// SWIGLU (vec.cpp ggml_vec_swiglu_f32, AVX2): per 8 elements silu(x) * g with ggml_v_silu(x) = x / (1 + v_expf(0 - x));
// a tail of n % 8 uses x / (1.0f + expf(-x)) * g.
inline void swiglu(const float* x, const float* g, int64_t n, float* y) {
    int64_t i = 0;
    for (; i + 7 < n; i += 8)
        for (int l = 0; l < 8; ++l) y[i + l] = x[i + l] / (1.0f + v_expf(0.0f - x[i + l])) * g[i + l];
    for (; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i])) * g[i];
}

}  // namespace tracelm::ggml_ref
