#include "formats/repack.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace tracelm {

namespace {

// One block of 16 rows of a 32-element type (row r's block at in + r * stride) into its repacked form at o
// (zeroed).
void repack_32_block(DType t, const uint8_t* in, size_t stride, uint8_t* o) {
    const bool q8 = t == DType::Q8_0, has_m = t == DType::Q4_1 || t == DType::Q5_1;
    const bool five = t == DType::Q5_0 || t == DType::Q5_1;
    // Offsets in a GGML block of the mins, the high bits and the nibbles or int8 values.
    const size_t bb = dtype_block_bytes(t), m_at = 2, qh_at = has_m ? 4 : 2, qs_at = bb - (q8 ? 32 : 16);
    for (int r = 0; r < kRepackRows; ++r) {
        const uint8_t* blk = in + static_cast<size_t>(r) * stride;
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

// The same for Q4_K and Q5_K.
void repack_k_block(DType t, const uint8_t* in, size_t stride, uint8_t* o) {
    const bool five = t == DType::Q5_K;
    uint8_t* sc_lo = o + 4 * kRepackRows;
    uint8_t* sc_hi = sc_lo + 8 * kRepackRows;
    uint8_t* qh = sc_hi + 4 * kRepackRows;
    uint8_t* qs = qh + (five ? 32 * kRepackRows : 0);
    for (int r = 0; r < kRepackRows; ++r) {
        const uint8_t* blk = in + static_cast<size_t>(r) * stride;
        std::memcpy(o + 2 * r, blk, 2);
        std::memcpy(o + 2 * kRepackRows + 2 * r, blk + 2, 2);
        const uint8_t* s = blk + 4;
        uint32_t hi = 0;
        for (int j = 0; j < 8; ++j) {
            // GGML's get_scale_min_k4.
            const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
            const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
            sc_lo[16 * j + r] = static_cast<uint8_t>((sc & 15) | (m & 15) << 4);
            hi |= static_cast<uint32_t>((sc >> 4) | (m >> 4) << 2) << (4 * j);
        }
        std::memcpy(sc_hi + 4 * r, &hi, 4);
        if (five) {
            const uint8_t* h = blk + 16;
            for (int j = 0; j < 8; ++j)
                for (int c = 0; c < 8; ++c)
                    for (int i = 0; i < 4; ++i)
                        if ((h[4 * c + i] >> j) & 1) qh[64 * j + 8 * c + (4 * r + i) / 8] |= uint8_t(1u << ((4 * r + i) % 8));
        }
        const uint8_t* q = blk + (five ? 48 : 16);
        for (int p = 0; p < 4; ++p)
            for (int c = 0; c < 8; ++c) std::memcpy(qs + 64 * (8 * p + c) + 4 * r, q + 32 * p + 4 * c, 4);
    }
}

// Q6_K: the unsigned 6-bit q of element e of a GGML block (ggml-common.h's layout, halves of 128).
int q6k_at(const uint8_t* blk, int e) {
    const int n = e / 128, m = e % 128, l = m % 32, c = m / 32;
    const uint8_t lo = blk[64 * n + 32 * (c & 1) + l];
    return (c < 2 ? lo & 15 : lo >> 4) | ((blk[128 + 32 * n + l] >> (2 * c)) & 3) << 4;
}

void repack_q6k_block(DType, const uint8_t* in, size_t stride, uint8_t* o) {
    uint8_t* sc = o + 2 * kRepackRows;
    uint8_t* ql = sc + 16 * kRepackRows;
    uint8_t* qh = ql + 128 * kRepackRows;
    for (int r = 0; r < kRepackRows; ++r) {
        const uint8_t* blk = in + static_cast<size_t>(r) * stride;
        std::memcpy(o + 2 * r, blk + 208, 2);
        for (int s = 0; s < 16; ++s) {
            sc[16 * s + r] = blk[192 + s];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) {
                    const int q = q6k_at(blk, 16 * s + 4 * j + i);
                    ql[64 * (2 * s + j / 2) + 4 * r + i] |= static_cast<uint8_t>((q & 15) << (4 * (j % 2)));
                    qh[64 * s + 4 * r + i] |= static_cast<uint8_t>((q >> 4) << (2 * j));
                }
        }
    }
}

}  // namespace

void repack_r16(DType t, const void* src, void* dst, int64_t rows, int64_t cols) {
    if (dtype_repacked(t) == t || dtype_is_repacked(t) || !dtype_row_ok(t, cols))
        throw std::invalid_argument("repack_r16: cannot repack " + std::string(dtype_name(t)) + " rows of " +
                                    std::to_string(cols));
    const auto* in = static_cast<const uint8_t*>(src);
    auto* out = static_cast<uint8_t*>(dst);
    const size_t bb = dtype_block_bytes(t), row_bytes = dtype_row_bytes(t, cols);
    const int64_t nb = cols / dtype_block_elems(t), groups = rows / kRepackRows;
    const auto block = t == DType::Q6_K ? repack_q6k_block : dtype_block_elems(t) == 256 ? repack_k_block : repack_32_block;
    for (int64_t g = 0; g < groups; ++g)
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* i = in + static_cast<size_t>(g * kRepackRows) * row_bytes + static_cast<size_t>(b) * bb;
            uint8_t* o = out + static_cast<size_t>((g * nb + b) * kRepackRows) * bb;
            std::memset(o, 0, kRepackRows * bb);  // high bits are set one by one
            block(t, i, row_bytes, o);
        }
    // Rows past the last whole group stay where they are.
    const size_t packed = static_cast<size_t>(groups * kRepackRows) * row_bytes;
    std::memcpy(out + packed, in + packed, static_cast<size_t>(rows) * row_bytes - packed);
}

}  // namespace tracelm
