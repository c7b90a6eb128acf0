// `tracelm bench --synthetic-context N[,N...]`: decode at long contexts without paying their prefill. Each context is
// filled with seeded random cache values (Engine::admit_synthetic); a step's attention and indexer do the same work
// whatever the values. Replayed decode speed per context and, for a model with DeepSeek's indexer, with the indexer's
// top-k selection and with dense attention; on the CPU also where an eager step's time goes (StepProfileBackend).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"

namespace tracelm::cli {

// A CPU backend that, while profiling, adds each eager op's wall time to its part of the step: "attention" (every
// attention op), "indexer" (DeepSeek's lightning indexer: its scores, top-k, key norm, its rotations and the
// products by the weights mark_indexer() names), "other". Eagerly an op runs to completion inside its call, so the
// time around the call is the op's.
class StepProfileBackend : public cpu::CpuBackend {
   public:
    using CpuBackend::CpuBackend;
    void set_profiling(bool on) { profiling_ = on; }
    // Products by these weights count as the indexer's.
    void mark_indexer(const Tensor& weight) { indexer_weights_.push_back(weight.raw()); }
    // Seconds per part since the last reset.
    const std::map<std::string, double>& parts() const { return parts_; }
    void reset_parts() { parts_.clear(); }

   protected:
    void do_mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Tensor& cache, const AttentionMeta& meta,
                          const Tensor* indices, int heads, float scale, const Tensor& out) override;
    void do_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                      int heads, int kv_heads, int head_dim, float scale, const Tensor& out) override;
    void do_sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                             const Tensor& indices, int heads, int kv_heads, int head_dim, float scale,
                             const Tensor& out) override;
    void do_dsa_indexer_paged(const Tensor& q, const Tensor& weights, const Tensor& key_cache,
                              const AttentionMeta& meta, int heads, const Tensor& scores) override;
    void do_dsa_topk_causal(const Tensor& scores, const AttentionMeta& meta, const DsaTopkWorkspace& ws,
                            const Tensor& indices) override;
    void do_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& out) override;
    void do_rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope,
                      int head_stride) override;
    void do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out,
                   int64_t batch_rows) override;
    void do_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows) override;

   private:
    // Runs f, adding its time to `part` while profiling.
    template <typename F>
    void timed(const char* part, F&& f);
    bool is_indexer(const Tensor& w) const;
    bool profiling_ = false;
    std::vector<const void*> indexer_weights_;
    std::map<std::string, double> parts_;
};

struct LongContextOptions {
    std::vector<int64_t> contexts;
    int steps = 8;          // timed replayed steps per context and mode (after an eager and a capturing one)
    int profile_steps = 3;  // profiled eager steps per context and mode (after an untimed one), on the CPU
    EngineOptions engine;   // kv_dtype, dense_attention (when the model has no indexer to compare)
};

// Runs the measurement and returns its JSON. `profiler`: the backend, when it is a StepProfileBackend.
nlohmann::json bench_long_context(const Model& model, Backend& backend, StepProfileBackend* profiler,
                                  const LongContextOptions& opt);
void print_long_context_bench(const nlohmann::json& j);

}  // namespace tracelm::cli
