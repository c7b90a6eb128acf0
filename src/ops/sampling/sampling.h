// Sampling: one token per row of logits, on the device, inside the captured decode step.
//
// sample(logits [R, V] f32, params [R, kParamWords], counts [R, V] i32, step [1] i32, step_offset,
//        ids [R] i32, logprobs [R, 1 + kMaxLogprobs] f32, top_ids [R, kMaxLogprobs] i32)
//
// Each row is independent of every other row (its result depends on its logits, parameters, counts and draw
// number only). Per row, in this order (llama.cpp's default chain where both have the step):
//   1. penalties, in place on the logits (so later reads of the logits see them): for every token v with
//      counts[v] != 0 (seen: in the prompt or generated), repetition (CTRL / llama.cpp): x /= r if x > 0, else
//      x *= r; then with g = counts[v] & kCountMask (times generated, OpenAI): x -= g * frequency + (g > 0) * presence.
//   2. logprobs, when asked (params.logprobs >= 0): from the penalised logits at temperature 1 over the whole
//      vocabulary (log-softmax), the chosen token's and the params.logprobs best tokens' (rank order below).
//   3. forced in [1, V]: the id is forced - 1 (steps 4-7 skipped). Else, temperature == 0: the id is argmax (the
//      lowest index wins ties; NaN never wins), exactly Backend::argmax. Otherwise, over the candidates (every
//      non-NaN token):
//   4. top_k > 0: the top_k best by rank (logit descending, then id ascending); all of them when fewer.
//   5. top_p < 1: with p_i = w1_i / Z (w1 = exp(x - max), Z summed over the candidates in ascending id order),
//      the shortest rank-order prefix whose cumulative p (summed in rank order) reaches top_p.
//   6. min_p > 0: the candidates with x >= max + log(min_p).
//   7. draw: weights w = exp((x - max) / temperature) in double, summed over the remaining candidates in ascending
//      id order to W; u = uniform(seed, draw) in [0, 1); the first candidate (ascending id) whose running sum
//      exceeds u * W. A token of weight 0 is never drawn.
//   The draw number is step + step_offset - params.draw_base (draw_number): n for the sequence's n-th sampled
//   token (0: the one after the prompt).
//   When the maximum is +inf, each +inf token has weight 1 and every other token 0 (the limit of the softmax);
//   when no token is above -inf (or all are NaN) the id is argmax's.
// 8. counts[id] += 1 (the graph keeps the generated counts itself).
//
// adjust_logits(logits [R, V] f32, flags [R, 2] i32, mask [R, ceil(V / 32)] i32, bias_ids [R, kMaxLogitBias] i32,
//               bias_values [R, kMaxLogitBias] f32), run before sample on the same logits:
//   0. with n = flags[r, 1] clamped to [0, kMaxLogitBias]: logits[bias_ids[r, j]] += bias_values[r, j] for j < n, in
//      order, ids outside [0, V) skipped (OpenAI's logit_bias, added to the raw logits, before the penalties);
//      then, when flags[r, 0] != 0, every token v whose bit (v % 32) of mask word v / 32 is clear becomes -inf
//      (constrained decoding). A row with
//      flags (0, 0) is untouched and costs one read. A -inf token stays -inf through the penalties, is never
//      argmax's pick while any token is above -inf, and has weight 0 in the draw, so it is never sampled under
//      any setting; logprobs report it as -inf.
//
// top_k / top_p never sort the vocabulary: implementations select the k best in O(V) (dsa_topk's radix
// selection) and sort only those; top_p without top_k selects a candidate prefix, checks that its mass reaches
// top_p, and widens it only when it does not.
//
// This header is also compiled by nvcc.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "runtime/backend.h"

#if defined(__CUDACC__)
#define TRACELM_SAMPLING_HD __host__ __device__
#else
#define TRACELM_SAMPLING_HD
#endif

namespace tracelm::sampling {

constexpr int kMaxLogprobs = 20;
// logit_bias entries per row (OpenAI's limit is 300 as well).
constexpr int kMaxLogitBias = 300;
// Mask words of a vocabulary of `vocab` tokens.
constexpr int64_t mask_words(int64_t vocab) { return (vocab + 31) / 32; }
// counts[v]: times generated in the low bits, kPromptBit when v is in the prompt.
constexpr int32_t kPromptBit = int32_t{1} << 30;
constexpr int32_t kCountMask = kPromptBit - 1;

// One row's parameters exactly as they lie in the device buffer (kParamWords 32-bit words).
struct RowParams {
    float temperature = 0.0f;  // 0: greedy
    int32_t top_k = 0;         // 0: off
    float top_p = 1.0f;        // 1: off
    float min_p = 0.0f;        // 0: off
    float repetition_penalty = 1.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint32_t seed_lo = 0, seed_hi = 0;
    int32_t logprobs = -1;  // -1: none; n in [0, kMaxLogprobs]: the chosen token's and the n best
    // Subtracted from step + step_offset to give the draw number, so a sequence that joins a running batch (whose
    // step counter is already past 0) still draws 0, 1, 2, ... for its own tokens.
    int32_t draw_base = 0;
    // > 0: the row's token is forced - 1 (when below the vocabulary), not chosen: a given token is scored (a prompt
    // token's log-probability, Engine::admit's prompt_logprobs). 0: chosen as below.
    int32_t forced = 0;

    TRACELM_SAMPLING_HD bool penalised() const {
        return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
    }
};
constexpr int64_t kParamWords = static_cast<int64_t>(sizeof(RowParams) / sizeof(int32_t));
static_assert(sizeof(RowParams) % sizeof(int32_t) == 0);

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
struct Philox4 {
    uint32_t v[4];
};
TRACELM_SAMPLING_HD inline Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; ++r) {
        const uint64_t p0 = uint64_t{0xD2511F53u} * c.v[0];
        const uint64_t p1 = uint64_t{0xCD9E8D57u} * c.v[2];
        const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
        const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
        c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

// Step 7's draw number of a row (unsigned arithmetic: wraps, never overflows).
TRACELM_SAMPLING_HD inline uint32_t draw_number(int32_t step, int step_offset, const RowParams& p) {
    return static_cast<uint32_t>(step) + static_cast<uint32_t>(step_offset) - static_cast<uint32_t>(p.draw_base);
}

// The draw's uniform number in [0, 1) with 53 random bits: Philox keyed by the seed at counter (draw, 0, 0, 0).
TRACELM_SAMPLING_HD inline double uniform(uint32_t seed_lo, uint32_t seed_hi, uint32_t draw) {
    const Philox4 r = philox4x32_10(Philox4{{draw, 0u, 0u, 0u}}, seed_lo, seed_hi);
    const uint64_t bits = (uint64_t{r.v[0]} << 21) | (r.v[1] >> 11);
    return static_cast<double>(bits) * 0x1p-53;
}

// Rank order: a ranks before b (larger logit, then lower id). NaN is excluded before ranking.
TRACELM_SAMPLING_HD inline bool ranks_before(float xa, int64_t a, float xb, int64_t b) {
    return xa > xb || (xa == xb && a < b);
}

// Step 1 on one logit.
TRACELM_SAMPLING_HD inline float penalise(float x, int32_t count, const RowParams& p) {
    if (count == 0) return x;
    x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
    const int32_t g = count & kCountMask;
    return x - static_cast<float>(g) * p.frequency_penalty - (g > 0 ? p.presence_penalty : 0.0f);
}

// Weight of logit x against the row maximum m with inverse temperature inv_t (see step 7 and +inf above).
TRACELM_SAMPLING_HD inline double weight(float x, float m, double inv_t) {
    if (std::isinf(m) && m > 0) return x == m ? 1.0 : 0.0;
    return std::exp((static_cast<double>(x) - m) * inv_t);
}

// log(weight(x, m, 1)) without the exp's underflow.
TRACELM_SAMPLING_HD inline double log_weight(float x, float m) {
    if (std::isinf(m) && m > 0) return x == m ? 0.0 : -INFINITY;
    return static_cast<double>(x) - m;
}

// Backend::argmax of one row: the first maximum; NaN never wins; a row without a number gives its first
// -inf, or 0.
TRACELM_SAMPLING_HD inline int64_t argmax_row(const float* row, int64_t n) {
    int64_t best = 0;
    float best_v = -INFINITY;
    bool found = false;
    for (int64_t i = 0; i < n; ++i) {
        // Strictly greater keeps the lowest index on ties; NaN compares false and never wins.
        if (row[i] > best_v || (!found && row[i] == best_v)) {
            best_v = row[i];
            best = i;
            found = true;
        }
    }
    return best;
}

// The smallest logit min_p keeps (step 6), -inf when min_p is off.
TRACELM_SAMPLING_HD inline double min_p_floor(float m, float min_p) {
    return min_p > 0.0f ? static_cast<double>(m) + std::log(static_cast<double>(min_p)) : -INFINITY;
}

// Throws std::invalid_argument ("sample: ...") unless the tensors have the shapes and dtypes above and the
// workspace holds `workspace_bytes` for at least these rows and vocabulary.
void check_sample_args(const Tensor& logits, const SamplingIo& io, const Tensor& ids, size_t workspace_bytes);
// Throws std::invalid_argument ("sample: ...") for parameters outside their ranges: temperature, penalties and
// min_p finite and >= 0 (min_p <= 1), repetition_penalty > 0, top_k >= 0, top_p in (0, 1], logprobs in
// [-1, kMaxLogprobs].
void check_params(const RowParams& p);
// The workspace Backend::sample needs for up to max_rows rows of `vocab` tokens, allocated once.
SamplingWorkspace make_workspace(Backend& backend, int64_t max_rows, int64_t vocab);

// Throws std::invalid_argument ("adjust_logits: ...") unless the tensors have the shapes and dtypes above.
void check_adjust_args(const Tensor& logits, const LogitAdjustIo& io);
// The plain reference of step 0 on one row: `mask` may be null when mask_on is false.
void adjust_row_reference(float* logits, int64_t vocab, bool mask_on, const uint32_t* mask, int32_t n_bias,
                          const int32_t* bias_ids, const float* bias_values);
// Whether mask allows token v.
TRACELM_SAMPLING_HD inline bool mask_allows(const uint32_t* mask, int64_t v) {
    return ((mask[v >> 5] >> (v & 31)) & 1u) != 0;
}

// Log-probabilities of one sampled token (step 2 above).
struct TokenLogprobs {
    int32_t id = 0;
    float logprob = 0.0f;
    std::vector<std::pair<int32_t, float>> top;  // the best tokens, best first
};

// What one row's sampling gives.
struct RowResult {
    int32_t id = 0;
    float logprob = 0.0f;                        // when logprobs were asked
    int32_t top_ids[kMaxLogprobs] = {};          // -1 past the vocabulary's non-NaN tokens
    float top_logprobs[kMaxLogprobs] = {};
};
// The plain reference of one row (full sorts, no selection): penalises `logits` in place and bumps counts[id].
RowResult sample_row_reference(float* logits, int64_t vocab, const RowParams& p, int32_t* counts, uint32_t draw);

}  // namespace tracelm::sampling
