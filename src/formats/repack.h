// The repacked weight layout of the fast numerics (DType::*_R16): the GGML blocks of a matrix regrouped at load so
// that one SIMD register holds the same 4 elements of 16 rows, and a kernel forms 16 rows' integer block sums with
// one broadcast activation per instruction. Same bytes as the GGML layout, only moved (no extra memory).
//
// Rows go in groups of 16 (kRepackRows); rows past the last whole group keep GGML's layout and place. A group
// stores, for each block b in k order, 16 * (block bytes) bytes:
//   d:  the 16 rows' f16 scales (row r at 2r);
//   m:  (Q4_1, Q5_1) the 16 rows' f16 mins;
//   qh: (Q5_0, Q5_1) for each group of 4 elements j = 0..7 (elements 4j..4j+3), 64 bits: bit 4r + i is the high
//       bit of element 4j + i of row r;
//   qs: Q8_0: for each j = 0..7, 64 bytes: byte 4r + i is element 4j + i of row r;
//       4/5-bit types: for each c = 0..3, 64 bytes: byte 4r + i is GGML's qs[4c + i] of row r, whose low nibble is
//       element 4c + i and whose high nibble is element 16 + 4c + i.
// Q4_K and Q5_K (blocks of 256: 8 sub-blocks j of 32 with 6-bit scales sc_j and mins m_j) store, per block:
//   d, dmin: the 16 rows' f16 d, then their f16 dmin;
//   sc_lo: for each j, 16 bytes: byte r is (sc_j & 15) | (m_j & 15) << 4 of row r;
//   sc_hi: for each row r, 32 bits: bits 4j..4j+3 are (sc_j >> 4) | (m_j >> 4) << 2;
//   qh: (Q5_K) for each j and c = 0..7, 64 bits: bit 4r + i is the high bit of element 32j + 4c + i of row r;
//   qs: for each pair of sub-blocks p = 0..3 and c = 0..7, 64 bytes: byte 4r + i is GGML's qs[32p + 4c + i] of
//       row r, whose low nibble is element 4c + i of sub-block 2p and whose high nibble that of sub-block 2p + 1.
// Q6_K (blocks of 256: 16 sub-blocks s of 16 with int8 scales; q = the unsigned 6 bits, value d * sc_s * (q - 32)):
//   d:  the 16 rows' f16 d;
//   sc: for each s, 16 bytes: byte r is sc_s of row r;
//   ql: for each s and u = 0..1, 64 bytes: byte 4r + i holds the low 4 bits of element 16s + 8u + i of row r in
//       its low nibble and those of element 16s + 8u + 4 + i in its high nibble;
//   qh: for each s, 64 bytes: bits 2j, 2j + 1 of byte 4r + i are the high 2 bits of element 16s + 4j + i of row r.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace tracelm {

inline constexpr int64_t kRepackRows = 16;

// Copies `rows` rows of `cols` elements of GGML type t (one with dtype_repacked(t) != t) from src to dst in the
// layout of dtype_repacked(t). src and dst do not overlap; both hold dtype_row_bytes(t, cols) * rows bytes.
void repack_r16(DType t, const void* src, void* dst, int64_t rows, int64_t cols);

}  // namespace tracelm
