#include "formats/repack.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace tracelm {

void repack_r16(DType t, const void* src, void* dst, int64_t rows, int64_t cols) {
    if (dtype_repacked(t) == t || dtype_is_repacked(t) || !dtype_row_ok(t, cols))
        throw std::invalid_argument("repack_r16: cannot repack " + std::string(dtype_name(t)) + " rows of " +
                                    std::to_string(cols));
    const auto* in = static_cast<const uint8_t*>(src);
    auto* out = static_cast<uint8_t*>(dst);
    const size_t bb = dtype_block_bytes(t), row_bytes = dtype_row_bytes(t, cols);
    const int64_t nb = cols / 32, groups = rows / kRepackRows;
    const bool q8 = t == DType::Q8_0, has_m = t == DType::Q4_1 || t == DType::Q5_1;
    const bool five = t == DType::Q5_0 || t == DType::Q5_1;
    // Offsets in a GGML block of the mins, the high bits and the nibbles or int8 values.
    const size_t m_at = 2, qh_at = has_m ? 4 : 2, qs_at = bb - (q8 ? 32 : 16);
    for (int64_t g = 0; g < groups; ++g)
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* o = out + (g * nb + b) * kRepackRows * bb;
            std::memset(o, 0, kRepackRows * bb);  // the high bits are set one by one
            for (int r = 0; r < kRepackRows; ++r) {
                const uint8_t* blk = in + (g * kRepackRows + r) * row_bytes + b * bb;
                uint8_t* p = o;
                std::memcpy(p + 2 * r, blk, 2);
                p += 2 * kRepackRows;
                if (has_m) {
                    std::memcpy(p + 2 * r, blk + m_at, 2);
                    p += 2 * kRepackRows;
                }
                if (five) {
                    uint32_t h;
                    std::memcpy(&h, blk + qh_at, 4);
                    for (int j = 0; j < 8; ++j)
                        for (int i = 0; i < 4; ++i)
                            if ((h >> (4 * j + i)) & 1u) p[8 * j + (4 * r + i) / 8] |= uint8_t(1u << ((4 * r + i) % 8));
                    p += 8 * 8;
                }
                for (int j = 0; j < (q8 ? 8 : 4); ++j) std::memcpy(p + 64 * j + 4 * r, blk + qs_at + 4 * j, 4);
            }
        }
    // Rows past the last whole group stay where they are.
    const size_t packed = static_cast<size_t>(groups * kRepackRows) * row_bytes;
    std::memcpy(out + packed, in + packed, static_cast<size_t>(rows) * row_bytes - packed);
}

}  // namespace tracelm
