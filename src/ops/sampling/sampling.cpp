#include "ops/sampling/sampling.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/op_checks.h"

namespace tracelm::sampling {

using checks::require;
using checks::require_dtype;

void check_sample_args(const Tensor& logits, const SamplingIo& io, const Tensor& ids, size_t workspace_bytes) {
    require_dtype(logits, DType::F32, "sample");
    for (const Tensor* t : {&io.params, &io.counts, &io.step, &io.top_ids, &ids}) require_dtype(*t, DType::I32, "sample");
    require_dtype(io.logprobs, DType::F32, "sample");
    const int64_t R = logits.rows, V = logits.cols;
    require(V > 0 && V <= std::numeric_limits<int32_t>::max(), "sample", "vocabulary must have 1 to 2^31-1 tokens");
    require(ids.numel() == R, "sample", "one id per row of logits");
    require(io.params.rows == R && io.params.cols == kParamWords, "sample", "params must be [rows, kParamWords]");
    require(io.counts.rows == R && io.counts.cols == V, "sample", "counts must be [rows, vocab]");
    require(io.step.numel() == 1, "sample", "step must be one value");
    require(io.logprobs.rows == R && io.logprobs.cols == 1 + kMaxLogprobs, "sample", "logprobs must be [rows, 21]");
    require(io.top_ids.rows == R && io.top_ids.cols == kMaxLogprobs, "sample", "top_ids must be [rows, 20]");
    require(io.ws.buffer != nullptr, "sample", "no workspace (make one with sampling::make_workspace)");
    require(io.ws.buffer->bytes >= workspace_bytes && R <= io.ws.max_rows && V <= io.ws.vocab, "sample",
            "workspace '" + io.ws.buffer->name + "' made for up to " + std::to_string(io.ws.max_rows) + " rows of " +
                std::to_string(io.ws.vocab) + " tokens cannot serve " + std::to_string(R) + " rows of " +
                std::to_string(V));
}

void check_params(const RowParams& p) {
    auto finite = [](float v) { return std::isfinite(v); };
    require(finite(p.temperature) && p.temperature >= 0.0f, "sample", "temperature must be finite and >= 0");
    require(p.top_k >= 0, "sample", "top_k must be >= 0");
    require(p.top_p > 0.0f && p.top_p <= 1.0f, "sample", "top_p must be in (0, 1]");
    require(p.min_p >= 0.0f && p.min_p <= 1.0f, "sample", "min_p must be in [0, 1]");
    require(finite(p.repetition_penalty) && p.repetition_penalty > 0.0f, "sample",
            "repetition_penalty must be finite and > 0");
    require(finite(p.presence_penalty) && finite(p.frequency_penalty), "sample",
            "presence and frequency penalties must be finite");
    require(p.logprobs >= -1 && p.logprobs <= kMaxLogprobs, "sample", "logprobs must be in [-1, 20]");
    require(p.forced >= 0, "sample", "forced must be >= 0");
}

SamplingWorkspace make_workspace(Backend& backend, int64_t max_rows, int64_t vocab) {
    if (max_rows < 0 || vocab < 0) throw std::invalid_argument("sample: workspace sizes must not be negative");
    SamplingWorkspace ws;
    ws.buffer = backend.alloc(backend.sampling_workspace_bytes(max_rows, vocab), "sampling workspace");
    ws.max_rows = max_rows;
    ws.vocab = vocab;
    return ws;
}

void check_adjust_args(const Tensor& logits, const LogitAdjustIo& io) {
    require_dtype(logits, DType::F32, "adjust_logits");
    for (const Tensor* t : {&io.flags, &io.mask, &io.bias_ids}) require_dtype(*t, DType::I32, "adjust_logits");
    require_dtype(io.bias_values, DType::F32, "adjust_logits");
    const int64_t R = logits.rows, V = logits.cols;
    require(V > 0 && V <= std::numeric_limits<int32_t>::max(), "adjust_logits",
            "vocabulary must have 1 to 2^31-1 tokens");
    require(io.flags.rows == R && io.flags.cols == 2, "adjust_logits", "flags must be [rows, 2]");
    require(io.mask.rows == R && io.mask.cols == mask_words(V), "adjust_logits", "mask must be [rows, ceil(vocab/32)]");
    for (const Tensor* t : {&io.bias_ids, &io.bias_values})
        require(t->rows == R && t->cols == kMaxLogitBias, "adjust_logits", "bias entries must be [rows, 300]");
}

void adjust_row_reference(float* x, int64_t V, bool mask_on, const uint32_t* mask, int32_t n_bias,
                          const int32_t* bias_ids, const float* bias_values) {
    for (int32_t j = 0; j < std::clamp(n_bias, 0, kMaxLogitBias); ++j)
        if (bias_ids[j] >= 0 && bias_ids[j] < V) x[bias_ids[j]] += bias_values[j];
    if (!mask_on) return;
    for (int64_t v = 0; v < V; ++v)
        if (!mask_allows(mask, v)) x[v] = -INFINITY;
}

RowResult sample_row_reference(float* x, int64_t V, const RowParams& p, int32_t* counts, uint32_t draw) {
    if (p.penalised()) {
        for (int64_t v = 0; v < V; ++v) x[v] = penalise(x[v], counts[v], p);
    }
    // Every non-NaN token in rank order.
    std::vector<int32_t> ranked;
    for (int64_t v = 0; v < V; ++v) {
        if (!std::isnan(x[v])) ranked.push_back(static_cast<int32_t>(v));
    }
    std::sort(ranked.begin(), ranked.end(), [&](int32_t a, int32_t b) { return ranks_before(x[a], a, x[b], b); });
    const float m = ranked.empty() ? -INFINITY : x[ranked[0]];
    const int32_t argmax = ranked.empty() ? 0 : ranked[0];
    // Sum of w over ids in ascending order.
    auto mass = [&](std::vector<int32_t> ids, double inv_t) {
        std::sort(ids.begin(), ids.end());
        double z = 0.0;
        for (int32_t v : ids) z += weight(x[v], m, inv_t);
        return z;
    };

    RowResult res;
    res.id = argmax;
    const bool live = m > -INFINITY;
    if (p.forced > 0 && p.forced <= V) {
        res.id = p.forced - 1;
    } else if (p.temperature != 0.0f && live) {
        std::vector<int32_t> cand = ranked;
        if (p.top_k > 0 && static_cast<size_t>(p.top_k) < cand.size()) cand.resize(static_cast<size_t>(p.top_k));
        if (p.top_p < 1.0f) {
            const double goal = static_cast<double>(p.top_p) * mass(cand, 1.0);
            double cum = 0.0;
            size_t keep = 0;
            while (keep < cand.size()) {
                cum += weight(x[cand[keep++]], m, 1.0);
                if (cum >= goal) break;
            }
            cand.resize(keep);
        }
        const double floor = min_p_floor(m, p.min_p);
        std::erase_if(cand, [&](int32_t v) { return static_cast<double>(x[v]) < floor; });
        std::sort(cand.begin(), cand.end());
        const double inv_t = 1.0 / static_cast<double>(p.temperature);
        const double target = uniform(p.seed_lo, p.seed_hi, draw) * mass(cand, inv_t);
        double cum = 0.0;
        for (int32_t v : cand) {
            cum += weight(x[v], m, inv_t);
            if (cum > target) {
                res.id = v;
                break;
            }
        }
    }
    if (p.logprobs >= 0) {
        const double log_z = live ? std::log(mass(ranked, 1.0)) : 0.0;
        auto lp = [&](int32_t v) { return live ? static_cast<float>(log_weight(x[v], m) - log_z) : -INFINITY; };
        res.logprob = lp(res.id);
        for (int i = 0; i < kMaxLogprobs; ++i) {
            const bool have = i < p.logprobs && static_cast<size_t>(i) < ranked.size();
            res.top_ids[i] = have ? ranked[static_cast<size_t>(i)] : -1;
            res.top_logprobs[i] = have ? lp(ranked[static_cast<size_t>(i)]) : -INFINITY;
        }
    }
    counts[res.id] += 1;
    return res;
}

}  // namespace tracelm::sampling

namespace tracelm {

// The entry point of the sampling op, here beside its checks (runtime/backend.h).
void Backend::sample(const Tensor& logits, const SamplingIo& io, const Tensor& ids) {
    sampling::check_sample_args(logits, io, ids, sampling_workspace_bytes(io.ws.max_rows, io.ws.vocab));
    do_sample(logits, io, ids);
}

void Backend::adjust_logits(const Tensor& logits, const LogitAdjustIo& io) {
    sampling::check_adjust_args(logits, io);
    do_adjust_logits(logits, io);
}

}  // namespace tracelm
