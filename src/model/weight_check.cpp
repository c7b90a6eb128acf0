#include "model/weight_check.h"

#include <array>
#include <cstring>

namespace tracelm {

namespace {

// All exponent bits set: infinity or NaN.
bool f16_non_finite(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u; }
bool bf16_non_finite(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u; }
bool f32_non_finite(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }

template <typename T>
T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// Byte offsets of the f16 fields inside one block (ggml-common.h); a second field at 0 repeats the first.
std::array<size_t, 2> f16_fields(DType t) {
    switch (t) {
        case DType::Q4_1:
        case DType::Q5_1:
        case DType::Q4_K:
        case DType::Q5_K: return {0, 2};
        case DType::Q6_K: return {208, 208};
        default: return {0, 0};  // Q8_0, Q4_0, Q5_0
    }
}

}  // namespace

std::optional<int64_t> first_non_finite(DType dtype, const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    const size_t step = dtype_block_bytes(dtype);
    const int64_t n = static_cast<int64_t>(bytes / step);
    for (int64_t i = 0; i < n; ++i) {
        const unsigned char* at = p + static_cast<size_t>(i) * step;
        bool bad = false;
        switch (dtype) {
            case DType::F32: bad = f32_non_finite(load<uint32_t>(at)); break;
            case DType::BF16: bad = bf16_non_finite(load<uint16_t>(at)); break;
            case DType::F16: bad = f16_non_finite(load<uint16_t>(at)); break;
            case DType::I32:
            case DType::I64: return std::nullopt;
            default:
                for (const size_t off : f16_fields(dtype)) bad = bad || f16_non_finite(load<uint16_t>(at + off));
        }
        if (bad) return i;
    }
    return std::nullopt;
}

}  // namespace tracelm
