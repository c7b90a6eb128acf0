// Mixture-of-experts FFN ops (Qwen3-MoE's sparse MLP), as llama.cpp's build_moe_ffn computes it; the routing and the
// grouping of rows by expert run inside the ops, from device buffers, so a captured decode step needs no host read.
//
// moe_route(x [T, H] f32, router [E, H] f32, batch_rows, normalize, logits [T, E] f32, ids [T, k] i32,
// weights [T, k] f32), per row, as llama.cpp's build_moe_ffn computes it on its CPU backend:
//   logits = x . router^T as ggml's f32 MUL_MAT sums a product of batch_rows rows (cpu/kernels/kernels.h,
//   matmul_f32_ggml: ggml_vec_dot_f32's order for 1 row, llamafile's tinyBLAS's from 2 when H % 8 == 0);
//   p = ggml's SOFT_MAX of the logits (ggml::soft_max_row, ops/ggml_math.h); the k experts of largest p, best first
//   (ggml's descending ARGSORT; ties: the lower id first); weights[j] = p of expert ids[j], and with `normalize`
//   (Qwen3's norm_topk_prob) each divided by their sum (ggml's SUM_ROWS: in double, rounded to f32; CLAMPed to at
//   least 2^-14, then DIV). NaN logits count as -inf; a row whose largest logit is not finite routes to experts
//   0..k-1 with weight 0.
// moe_ffn(x [T, H] f32, ids [T, k], weights [T, k], experts, out [T, H] f32), per row t:
//   out[t] = sum over slots j = 0..k-1, in that order, of weights[t, j] * y_j, where y_j = down_e . (act(gate_e . x_t)
//   * (up_e . x_t)) with e = ids[t, j]: each product rounded to f32 and the sum taken slot after slot from slot 0's
//   (ggml's MUL by the weights, then ADD of the slots' views in order). gate_e / up_e are rows [e*I, (e+1)*I) of
//   the stacked gate / up weights [E*I, H], down_e rows [e*H, (e+1)*H) of down [E*H, I]; an id outside [0, E)
//   contributes nothing. Every product is matmul's for that weight type, in the order of a product of one row when
//   batch_rows is 1 (a decode step: each row its own sequence's forward), else of as many rows as the (row, slot)
//   pairs that chose expert e among the T rows, which are then the whole forward (ggml's MUL_MAT_ID gives each
//   expert's rows to MUL_MAT's kernels as one product: for the K types, the tiled order from kGgmlTiledMinRows
//   rows). A row's output depends on its own x, ids and weights only, except through that count for K-type experts
//   in a forward of several rows: backends group the rows by expert (each active expert's weights read once for all
//   its rows) without changing any other bit. Since a piece of a forward cannot know the counts of the whole one, a
//   K-type (unrepacked) moe_ffn with 1 < batch_rows != T is refused.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend.h"

namespace tracelm::moe {

// Throw std::invalid_argument ("moe_route: ..." / "moe_ffn: ...") on dtypes or shapes other than the above.
void check_route_args(const Tensor& x, const Tensor& router, int64_t batch_rows, const Tensor& logits,
                      const Tensor& ids, const Tensor& weights);
void check_ffn_args(const Tensor& x, const Tensor& ids, const Tensor& weights, const MoeExperts& experts,
                    const Tensor& out, int64_t batch_rows);

}  // namespace tracelm::moe

namespace tracelm::reference {

// moe_route of one row of E logits (the router product done) into ids[k] and weights[k], exactly as defined above.
void moe_route_row(const float* logits, int64_t experts, int k, bool normalize, int32_t* ids, float* weights);

}  // namespace tracelm::reference
