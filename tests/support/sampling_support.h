// Helpers of the sampling tests (ops, CUDA op, engine): one sample() call (or adjust_logits + sample) over device
// buffers, and the device row of sampling parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/sampling/sampling.h"
#include "runtime/backend.h"

namespace tracelm::testing {

using sampling::RowParams;

// Device buffers for R rows of V logits and one sample() call over them (after adjust_logits once set_adjust() gave
// its inputs), eager or replayed from a graph.
class SampleOp {
   public:
    SampleOp(Backend& be, int64_t R, int64_t V) : be_(be), R_(R), V_(V) {
        auto t = [&](DType dt, int64_t rows, int64_t cols, const char* name) {
            bufs_.push_back(be.alloc(static_cast<size_t>(rows * cols) * 4, name));
            return whole(bufs_.back(), dt, rows, cols);
        };
        logits_ = t(DType::F32, R, V, "logits");
        ids_ = t(DType::I32, 1, R, "ids");
        io_.params = t(DType::I32, R, sampling::kParamWords, "params");
        io_.counts = t(DType::I32, R, V, "counts");
        io_.step = t(DType::I32, 1, 1, "step");
        io_.logprobs = t(DType::F32, R, 1 + sampling::kMaxLogprobs, "logprobs");
        io_.top_ids = t(DType::I32, R, sampling::kMaxLogprobs, "top_ids");
        io_.ws = sampling::make_workspace(be, R, V);
        bufs_.push_back(io_.ws.buffer);
        adj_.flags = t(DType::I32, R, 2, "flags");
        adj_.mask = t(DType::I32, R, sampling::mask_words(V), "mask");
        adj_.bias_ids = t(DType::I32, R, sampling::kMaxLogitBias, "bias_ids");
        adj_.bias_values = t(DType::F32, R, sampling::kMaxLogitBias, "bias_values");
    }
    ~SampleOp() {
        if (graph_ >= 0) be_.destroy_graph(graph_);
        for (Buffer* b : bufs_) be_.free(b);
    }
    void set(const std::vector<float>& logits, const std::vector<RowParams>& params, const std::vector<int32_t>& counts,
             int32_t step) {
        be_.upload(logits_, logits.data());
        be_.upload(io_.params, params.data());
        be_.upload(io_.counts, counts.data());
        be_.upload(io_.step, &step);
    }
    void set_logits(const std::vector<float>& logits, int32_t step) {
        be_.upload(logits_, logits.data());
        be_.upload(io_.step, &step);
    }
    // flags: (mask on, entries) per row; masks: R x mask_words(V) words; bias ids / values: R x kMaxLogitBias.
    void set_adjust(const std::vector<int32_t>& flags, const std::vector<uint32_t>& masks,
                    const std::vector<int32_t>& bias_ids, const std::vector<float>& bias_values) {
        be_.upload(adj_.flags, flags.data());
        be_.upload(adj_.mask, masks.data());
        be_.upload(adj_.bias_ids, bias_ids.data());
        be_.upload(adj_.bias_values, bias_values.data());
        adjusting_ = true;
    }
    void adjust() { be_.adjust_logits(logits_, adj_); }
    std::vector<int32_t> run() {
        issue();
        return ids();
    }
    void capture() {
        be_.begin_capture();
        issue();
        graph_ = be_.end_capture();
    }
    void replay() { be_.replay(graph_); }
    std::vector<int32_t> ids() { return get<int32_t>(ids_); }
    std::vector<float> logits() { return get<float>(logits_); }
    std::vector<int32_t> counts() { return get<int32_t>(io_.counts); }
    std::vector<float> logprobs() { return get<float>(io_.logprobs); }
    std::vector<int32_t> top_ids() { return get<int32_t>(io_.top_ids); }
    const LogitAdjustIo& adjust_io() const { return adj_; }
    const Tensor& logits_tensor() const { return logits_; }

   private:
    void issue() {
        if (adjusting_) be_.adjust_logits(logits_, adj_);
        be_.sample(logits_, io_, ids_);
    }
    template <typename T>
    std::vector<T> get(const Tensor& t) {
        std::vector<T> v(static_cast<size_t>(t.numel()));
        be_.download(t, v.data());
        return v;
    }
    Backend& be_;
    int64_t R_, V_;
    std::vector<Buffer*> bufs_;
    Tensor logits_, ids_;
    SamplingIo io_;
    LogitAdjustIo adj_;
    bool adjusting_ = false;
    GraphId graph_ = -1;
};

inline RowParams params(float temperature, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f, uint64_t seed = 1) {
    RowParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed_lo = static_cast<uint32_t>(seed);
    p.seed_hi = static_cast<uint32_t>(seed >> 32);
    return p;
}

}  // namespace tracelm::testing
