// Shared by the quantized-weight kernels (quant_*.cpp): the blocks activations are quantized into (the weight
// blocks are GGML's layouts, formats/ggml_blocks.h). Types only, no functions, since the ISA files may not call shared inline
// code (see kernels_internal.h). Weight fields are bytes, so blocks need no alignment; f16 scales are read with
// memcpy.
//
// The numbers are those of ggml's CPU backend on an x86 AVX2 build (ggml-cpu's quantize_row_q8_0/q8_1/q8_K and
// ggml_vec_dot_<type>_q8_<x>, with its FMA contractions, and its tiled K-quant kernel), so that a GGUF model
// computes what llama.cpp computes; tests/backends/test_quant.cpp checks them against ggml itself
// (scripts/make_ggml_dot_fixtures.py: vec_dot, and whole MUL_MATs). One output, for weight row w and activation
// row x, in float32:
//   acc[8] = 0; then for each weight block, in k order, with d = f(w.d) * x.d (one rounded product; f(h): the
//   f16 h as f32):
//     acc[i] = fma(d, float(lane[i]), acc[i])     for i = 0..7
//   where lane[i] is an exact integer: for the 32-element types the dot product of elements 4i..4i+3 of the
//   block (integer weights with offsets applied: Q4_0 q - 8, Q5_0 q - 16; Q4_1, Q5_1 plain q); for Q4_K and
//   Q5_K the sum over the 32-element sub-blocks s of scale(s) times the dot product of elements 4i..4i+3 of
//   s; for Q6_K the same over every 32 elements with the scale of the 16 they lie in and q unsigned (0..63),
//   less 32 * (scales[2i] * bsums[2i] + scales[2i+1] * bsums[2i+1]) (the offset, by the activation's sums
//   of 16). Then
//   y = hsum(acc) = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])),
//   plus a min term where the type has one:
//     Q4_1, Q5_1: y = hsum(acc) + summs, summs = fma(f(w.m), x.s, summs) per block (from 0);
//     Q4_K:       accm[j] = fma(dmin, float(prod[j]), accm[j]) per block, dmin = (-x.d) * f(w.dmin),
//                 prod[j] = min_{2j} * S_{2j} + min_{2j+1} * S_{2j+1} (S_s: the activation sum of sub-block
//                 s); y = hsum(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
//     Q5_K:       y = hsum(acc) + summs, summs = fma(dmin, float(sum_j prod[j]), summs);
//   and bias, if any, is added last. (K types write d as x.d * f(w.d): the same product.)
// That is QuantOrder::VecDot. llama.cpp sums a product of 8 or more activation rows by K-type weights in its tiled
// kernel's order instead (QuantOrder::Tiled; ggml-cpu/tiled/tiled-kernel.cpp, tiled_run_microtile_avx2, whose
// 256-element slabs add into the output in k order), per output:
//   y = 0; then for each weight block, in k order:
//     s1 = the block's exact integer sum: Q4_K, Q5_K: sum over the 8 sub-blocks j of scale(j) times the dot
//          product of sub-block j (q unsigned); Q6_K: sum over the 16 sub-blocks s of 16 of scales[s] times the
//          dot product of s with q - 32
//     res = f(w.d) * float(s1)
//     Q4_K, Q5_K: res = fma(-f(w.dmin), float(s2), res), s2 = sum_j min(j) * S_j (exact)
//     y = fma(res, x.d, y)
//   then bias, if any. (llamafile's tinyBLAS_Q0_AVX, which llama.cpp runs for Q8_0/Q4_0/Q5_0 products of 2 or more
//   rows, does VecDot's float operations, so the 32-element types have one order.)
// Integer sums are exact, so SIMD code may form them in any order; the float operations above are fixed
// (the files are built without contraction, so only the fmas written as such are fused).
//
// The fast numerics (the repacked types, DType::*_R16: the same blocks and activation blocks) take one integer
// sum per block instead of 8 lanes, so that a SIMD lane can hold a row instead of a part of a block:
//   acc = 0; for each block, in k order: acc = fma(float(isum), f(w.d) * x.d, acc)
//   where isum is the block's exact integer dot product (offsets applied, as above); Q4_1 and Q5_1 add
//   macc = fma(f(w.m), x.s, macc) per block (from 0) and y = acc + macc; then bias. Q4_K and Q5_K take, per block,
//   isum = sum_j sc_j * (dot product of sub-block j, q unsigned) and msum = sum_j m_j * (bsums[2j] + bsums[2j+1]):
//   acc = fma(float(isum), f(w.d) * x.d, acc); acc = fma(-float(msum), f(w.dmin) * x.d, acc); y = acc, then bias.
//   Q6_K takes isum = sum_s sc_s * (dot product of sub-block s of 16, q unsigned, less 32 * bsums[s]) and
//   acc = fma(float(isum), f(w.d) * x.d, acc).
// Each output still depends only on its own row and token, not on the tile or the batch; it differs from
// ggml's only by float rounding (tests/backends/test_quant.cpp bounds both against exact math).
#pragma once

#include <cstdint>

#include "formats/ggml_blocks.h"
#include "formats/repack.h"

namespace tracelm::cpu::quant {

// ---- weights: the GGML block layouts (formats/ggml_blocks.h) ----
using ggml::BlockQ4_0;
using ggml::BlockQ4_1;
using ggml::BlockQ4_K;
using ggml::BlockQ5_0;
using ggml::BlockQ5_1;
using ggml::BlockQ5_K;
using ggml::BlockQ6_K;
using ggml::BlockQ8_0;

// ---- activations ----
// ggml's block_q8_0 / block_q8_1 (quantize_row_q8_0 / q8_1): with amax = max|x|, d = amax / 127,
// id = amax != 0 ? 127 / amax : 0 and q = round-to-nearest-even(x * id), ggml stores f16(d) and, for Q8_1,
// s = f16(d * float(sum of q)) (the unrounded d). d and s here are those f16 values as f32.
struct ActBlock32 {
    float d;
    float s;  // Q8_1 (Q4_1 and Q5_1 weights) only
    int8_t q[32];
};
// The activation scratch of the 32-element types holds T rows of ActBlock32, then (for the SIMD kernels) the
// d, the s and the 32 q of every block again, token-major within chunks of 8 tokens ([chunk][block][token]),
// so that a tile of tokens loads its scales as one vector and finds its values at fixed offsets from one
// pointer, in one contiguous stretch per tile; then, in the same order, 8 int32 lane offsets and 8 float lane
// scales per block for the AVX512_VNNI tiles (quant_x86.inc).
// ggml's block_q8_K (quantize_row_q8_K_ref): with max = the first x of the largest |x|, iscale = -127 / max,
// q = min(127, round-to-nearest-even(iscale * x)) and d = 1 / iscale (so q and d have max's opposite sign);
// an all-zero block has d = 0, q = 0 and, here, bsums = 0.
struct ActBlock256 {
    float d;
    int16_t bsums[16];  // sum of each 16 consecutive q
    int8_t q[256];
};

static_assert(sizeof(ActBlock32) == 40 && sizeof(ActBlock256) == 292);

}  // namespace tracelm::cpu::quant
