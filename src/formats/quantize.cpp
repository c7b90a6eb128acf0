#include "formats/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "formats/ggml_blocks.h"

namespace tracelm {

namespace {

using ggml::BlockQ4_0;
using ggml::BlockQ4_K;
using ggml::BlockQ6_K;
using ggml::BlockQ8_0;

void store_f16(uint8_t* dst, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(dst, &h, 2);
}

// The float steps are separate multiplies and adds (this file is not built with FMA), as in the reference.
void quantize_q8_0(const float* x, BlockQ8_0& b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b.d, d);
    for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
}

void quantize_q4_0(const float* x, BlockQ4_0& b) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(b.d, d);
    auto q = [&](float v) { return static_cast<uint8_t>(std::min(15.0f, std::trunc(v * id + 8.5f))); };
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(q(x[j]) | (q(x[j + 16]) << 4));
}

// v / step rounded to nearest and clamped to [lo, hi]; 0 for a step of 0.
int level(float v, float step, int lo, int hi) {
    if (step == 0.0f) return 0;
    return std::clamp(static_cast<int>(std::lround(v / step)), lo, hi);
}

// The smallest f16 that is at least v >= 0 (finite for the values here), as a float.
float f16_at_least(float v) {
    uint16_t h = f32_to_f16(v);
    if (f16_to_f32(h) < v) ++h;  // the next larger positive f16
    return f16_to_f32(h);
}

// The least multiplier in [0, top] of `unit` that reaches v >= 0 (unit chosen so that top does).
int multiple_at_least(float v, float unit, int top) {
    if (unit == 0.0f) return 0;
    return std::min(top, static_cast<int>(std::ceil(v / unit)));
}

// A plain fit of our own (not ggml's error-minimising search; any fit makes valid blocks): each 32-element
// sub-block's mins rounded up to 6-bit multiples of dmin so that x + min >= 0, then its step rounded up to a 6-bit
// multiple of d so that 15 steps reach its highest value: every element within half a step.
void quantize_q4_k(const float* x, BlockQ4_K& b) {
    float lo[8], hi[8], max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
        lo[j] = std::min(0.0f, *std::min_element(x + 32 * j, x + 32 * j + 32));
        hi[j] = std::max(0.0f, *std::max_element(x + 32 * j, x + 32 * j + 32));
        max_min = std::max(max_min, -lo[j]);
    }
    const float dmin = f16_at_least(max_min / 63.0f);
    uint8_t m[8], sc[8];
    float need[8], max_need = 0.0f;
    for (int j = 0; j < 8; ++j) {
        m[j] = static_cast<uint8_t>(multiple_at_least(-lo[j], dmin, 63));
        need[j] = (hi[j] + dmin * static_cast<float>(m[j])) / 15.0f;
        max_need = std::max(max_need, need[j]);
    }
    const float d = f16_at_least(max_need / 63.0f);
    for (int j = 0; j < 8; ++j) sc[j] = static_cast<uint8_t>(multiple_at_least(need[j], d, 63));
    store_f16(b.d, d);
    store_f16(b.dmin, dmin);
    // ggml's get_scale_min_k4: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 in
    // the nibbles of bytes 8-11 with their top 2 bits in the top bits of bytes 0-7.
    for (int j = 0; j < 4; ++j) {
        b.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
        b.scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
        b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    uint8_t q[256];
    for (int j = 0; j < 8; ++j) {
        const float step = d * static_cast<float>(sc[j]), off = dmin * static_cast<float>(m[j]);
        for (int l = 0; l < 32; ++l) q[32 * j + l] = static_cast<uint8_t>(level(x[32 * j + l] + off, step, 0, 15));
    }
    for (int i = 0; i < 4; ++i)
        for (int l = 0; l < 32; ++l) b.qs[32 * i + l] = static_cast<uint8_t>(q[64 * i + l] | (q[64 * i + 32 + l] << 4));
}

// Each 16-element sub-block's step rounded up to an int8 multiple of d so that 31 steps reach its largest
// magnitude: every element within half a step.
void quantize_q6_k(const float* x, BlockQ6_K& b) {
    float need[16], max_need = 0.0f;
    for (int j = 0; j < 16; ++j) {
        float amax = 0.0f;
        for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
        need[j] = amax / 31.0f;
        max_need = std::max(max_need, need[j]);
    }
    const float d = f16_at_least(max_need / 127.0f);
    store_f16(b.d, d);
    int8_t q[256];
    for (int j = 0; j < 16; ++j) {
        b.scales[j] = static_cast<int8_t>(multiple_at_least(need[j], d, 127));
        const float step = d * static_cast<float>(b.scales[j]);
        for (int l = 0; l < 16; ++l) q[16 * j + l] = static_cast<int8_t>(level(x[16 * j + l], step, -32, 31));
    }
    // Per half of 128: element 32c + l has its low nibble in ql[32 (c & 1) + l] (low for c < 2, high for c >= 2)
    // and its top 2 bits at bits 2c, 2c + 1 of qh[l] (ggml_blocks.h).
    std::memset(b.ql, 0, sizeof b.ql);
    std::memset(b.qh, 0, sizeof b.qh);
    for (int h = 0; h < 2; ++h)
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l) {
                const auto u = static_cast<uint8_t>(q[128 * h + 32 * c + l] + 32);
                b.ql[64 * h + 32 * (c & 1) + l] |= static_cast<uint8_t>((u & 15) << (c >= 2 ? 4 : 0));
                b.qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * c));
            }
}

}  // namespace

bool can_quantize_to(DType dt) {
    return dt == DType::F32 || dt == DType::F16 || dt == DType::BF16 || dt == DType::Q8_0 || dt == DType::Q4_0 ||
           dt == DType::Q4_K || dt == DType::Q6_K;
}

void quantize_row(DType dt, const float* x, int64_t n, void* out) {
    if (!can_quantize_to(dt)) throw std::invalid_argument("cannot quantize to " + std::string(dtype_name(dt)));
    if (n < 0 || !dtype_row_ok(dt, n))
        throw std::invalid_argument(std::to_string(n) + " values are not whole " + std::string(dtype_name(dt)) +
                                    " blocks");
    auto* o = static_cast<uint8_t*>(out);
    switch (dt) {
        case DType::F32: std::memcpy(o, x, static_cast<size_t>(n) * 4); break;
        case DType::F16:
            for (int64_t i = 0; i < n; ++i) store_f16(o + 2 * i, x[i]);
            break;
        case DType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_bf16(x[i]);
                std::memcpy(o + 2 * i, &h, 2);
            }
            break;
        case DType::Q8_0:
            for (int64_t b = 0; b < n / 32; ++b) quantize_q8_0(x + 32 * b, reinterpret_cast<BlockQ8_0*>(o)[b]);
            break;
        case DType::Q4_K:
            for (int64_t b = 0; b < n / 256; ++b) quantize_q4_k(x + 256 * b, reinterpret_cast<BlockQ4_K*>(o)[b]);
            break;
        case DType::Q6_K:
            for (int64_t b = 0; b < n / 256; ++b) quantize_q6_k(x + 256 * b, reinterpret_cast<BlockQ6_K*>(o)[b]);
            break;
        default:
            for (int64_t b = 0; b < n / 32; ++b) quantize_q4_0(x + 32 * b, reinterpret_cast<BlockQ4_0*>(o)[b]);
            break;
    }
}

}  // namespace tracelm
