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

}  // namespace

bool can_quantize_to(DType dt) {
    return dt == DType::F32 || dt == DType::F16 || dt == DType::BF16 || dt == DType::Q8_0 || dt == DType::Q4_0;
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
        default:
            for (int64_t b = 0; b < n / 32; ++b) quantize_q4_0(x + 32 * b, reinterpret_cast<BlockQ4_0*>(o)[b]);
            break;
    }
}

}  // namespace tracelm
