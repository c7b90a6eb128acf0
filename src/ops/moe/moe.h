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
// moe_route_grouped(x [T, H] f32, router [E, H] f32, bias [E] f32, n_group, topk_group, normalize, scaling,
// logits [T, E] f32, ids [T, k] i32, weights [T, k] f32): DeepSeek-V3's noaux_tc routing, per row, in f32:
//   logits = x . router^T, the raw router products, each summed in one fixed order whatever the number of rows, so
//   that a row's routing depends on its own x only (batch invariance): on the CPU ggml_vec_dot_f32's (moe_route's for
//   batch_rows 1), on CUDA a serial sum in index order;
//   s = 1 / (1 + exp(-logit)); c = s + bias (the selection score; a NaN c ranks as -inf);
//   group g (experts [g * E/n_group, (g + 1) * E/n_group)) scores the sum of its two largest c (largest first; a NaN
//   sum ranks as -inf);
//   the topk_group best groups are kept (ties: the lower group); ids = the k best c among the kept groups' experts,
//   best first (ties: the lower id); weights[j] = s[ids[j]], with `normalize` divided by (their sum, taken in slot
//   order, + 1e-20 as transformers does), then times scaling.
//   E divisible by n_group with at least 2 experts a group, 1 <= topk_group <= n_group and k at most the experts of
//   topk_group groups.
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

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend.h"
#include "runtime/host_device.h"

namespace tracelm::moe {

// Throw std::invalid_argument ("moe_route: ..." / "moe_ffn: ...") on dtypes or shapes other than the above.
void check_route_args(const Tensor& x, const Tensor& router, int64_t batch_rows, const Tensor& logits,
                      const Tensor& ids, const Tensor& weights);
void check_route_grouped_args(const Tensor& x, const Tensor& router, const Tensor& bias, int n_group, int topk_group,
                              const Tensor& logits, const Tensor& ids, const Tensor& weights);
void check_ffn_args(const Tensor& x, const Tensor& ids, const Tensor& weights, const MoeExperts& experts,
                    const Tensor& out, int64_t batch_rows);

// Offers `id`, scored v, to the k best so far (best[0..n) and ids[0..n), best first) by insertion: it displaces an
// earlier one only when strictly better, so when ids come in ascending order ties keep the lower id first.
TRACELM_HD inline void keep_best(float v, int32_t id, float* best, int32_t* ids, int64_t& n, int64_t k) {
    if (n == k && !(v > best[n - 1])) return;
    int64_t at = n < k ? n++ : k - 1;
    while (at > 0 && v > best[at - 1]) {
        best[at] = best[at - 1];
        ids[at] = ids[at - 1];
        --at;
    }
    best[at] = v;
    ids[at] = id;
}

// The arguments of one row of moe_route_grouped once its logits are computed, for route_grouped_row.
struct GroupedRow {
    const float* logits;  // [E]
    const float* bias;    // [E]
    int64_t experts, k, n_group, topk_group;
    bool normalize;
    float scaling;
    float* best;      // scratch [topk_group + k]
    int32_t* groups;  // scratch [topk_group]
};

TRACELM_HD inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Expert e's selection score c; NaN ranks as -inf.
TRACELM_HD inline float choice_score(const GroupedRow& r, int64_t e) {
    const float c = sigmoid(r.logits[e]) + r.bias[e];
    return c != c ? -INFINITY : c;
}

// moe_route_grouped's selection and weights of one row in f32 (the CPU and CUDA backends' one implementation):
// ids [k] and weights [k] as defined above.
TRACELM_HD inline void route_grouped_row(const GroupedRow& r, int32_t* ids, float* weights) {
    const int64_t per = r.experts / r.n_group;
    float* group_score = r.best;
    float* c_best = r.best + r.topk_group;
    int64_t kept = 0;
    for (int64_t g = 0; g < r.n_group; ++g) {
        float m1 = -INFINITY, m2 = -INFINITY;  // the group's two largest c
        for (int64_t e = g * per; e < (g + 1) * per; ++e) {
            const float c = choice_score(r, e);
            if (c > m1) {
                m2 = m1;
                m1 = c;
            } else if (c > m2) {
                m2 = c;
            }
        }
        const float score = m1 + m2;
        keep_best(score != score ? -INFINITY : score, static_cast<int32_t>(g), group_score, r.groups, kept,
                  r.topk_group);
    }
    // The kept groups' experts in ascending id order, so that keep_best breaks ties by the lower id.
    int64_t n = 0;
    for (int64_t g = 0; g < r.n_group; ++g) {
        bool is_kept = false;
        for (int64_t j = 0; j < r.topk_group; ++j) is_kept = is_kept || r.groups[j] == g;
        if (!is_kept) continue;
        for (int64_t e = g * per; e < (g + 1) * per; ++e)
            keep_best(choice_score(r, e), static_cast<int32_t>(e), c_best, ids, n, r.k);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < r.k; ++j) {
        weights[j] = sigmoid(r.logits[ids[j]]);
        sum += weights[j];
    }
    // transformers' 1e-20 keeps a sum of zeros from dividing by zero.
    for (int64_t j = 0; j < r.k; ++j) weights[j] = (r.normalize ? weights[j] / (sum + 1e-20f) : weights[j]) * r.scaling;
}

}  // namespace tracelm::moe

namespace tracelm::reference {

// moe_route of one row of E logits (the router product done) into ids[k] and weights[k], exactly as defined above.
void moe_route_row(const float* logits, int64_t experts, int k, bool normalize, int32_t* ids, float* weights);

// moe_route_grouped of one row of E logits (the router product done), in double precision from the f32 logits and
// bias, rounded to f32 at the end: ids[k] and weights[k] as defined above.
void moe_route_grouped_row(const float* logits, const float* bias, int64_t experts, int n_group, int topk_group, int k,
                           bool normalize, double scaling, int32_t* ids, float* weights);

}  // namespace tracelm::reference
