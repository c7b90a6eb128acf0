// The CPU backend: the reference implementation of the Backend interface.
//
// "Device" memory is page-mapped apart from the host heap; buffers of a huge page or more are aligned to and
// marked for transparent huge pages (see do_alloc). Each op call resolves its pointers,
// sizes and work split into a CpuOp; eagerly the op is dispatched at once, under capture it is
// appended to the graph being recorded. Replay hands the recorded list to the pool in one dispatch.
#pragma once

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "backends/cpu/footprint.h"
#include "backends/cpu/thread_pool.h"
#include "runtime/backend.h"

namespace tracelm::cpu {

class CpuBackend : public Backend {
   public:
    explicit CpuBackend(int threads = ThreadPool::default_threads());
    ~CpuBackend() override;

    std::string name() const override { return "cpu"; }
    const BackendCapabilities& capabilities() const override { return static_capabilities(); }
    // Every weight type (floats and GGML blocks), f32/f16 KV caches, head_dim <= kMaxHeadDim.
    static const BackendCapabilities& static_capabilities();
    bool supports_capture() const override { return true; }
    int threads() const { return pool_.size(); }
    size_t graph_nodes(GraphId g) const override { return graphs_.at(static_cast<size_t>(g)).size(); }
    // Barriers one replay of g waits at (the ops of g minus those merged with their successor).
    size_t graph_barriers(GraphId g) const;
    // Ops executed (eagerly or in replays) since construction.
    uint64_t ops_executed() const { return ops_executed_; }
    // Ops dispatched one at a time as they were called (not recorded, not replayed) since construction.
    uint64_t eager_ops() const { return eager_ops_; }
    // Wall time spent inside pool dispatches (kernels plus their barriers) since construction.
    double busy_seconds() const { return static_cast<double>(busy_ns_) * 1e-9; }

    size_t sampling_workspace_bytes(int64_t max_rows, int64_t vocab) const override;
    size_t dsa_topk_workspace_bytes(int64_t max_rows, int64_t max_keys) const override;

   protected:
    void do_copy(const Tensor& dst, const Tensor& src) override;
    void do_embedding(const Tensor& ids, const Tensor& table, float scale, const Tensor& out) override;
    void do_rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override;
    void do_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& out) override;
    void do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out,
                   int64_t batch_rows) override;
    void do_rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope,
                      int head_stride) override;
    void do_kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                     const Tensor& v_cache) override;
    void do_cache_write(std::span<const Tensor> parts, const Tensor& slot_mapping, const Tensor& cache) override;
    void do_mla_absorb(const Tensor& x, const Tensor& w, int heads, const Tensor& out) override;
    void do_mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Tensor& cache, const AttentionMeta& meta,
                          const Tensor* indices, int heads, float scale, const Tensor& out) override;
    void do_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                      int heads, int kv_heads, int head_dim, float scale, const Tensor& out) override;
    void do_add(const Tensor& a, const Tensor& b, const Tensor& out) override;
    void do_glu(const Tensor& gate, const Tensor& up, Activation act, const Tensor& out) override;
    void do_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows) override;
    void do_add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out) override;
    void do_qk_norm_rope_kv_write(const QkvPrologue& p) override;
    void do_glu_matmul(const Tensor& gate, const Tensor& up, Activation act, const Tensor& w,
                       const Tensor& out, int64_t batch_rows) override;
    void do_gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out) override;
    void do_argmax(const Tensor& logits, const Tensor& ids) override;
    void do_sample(const Tensor& logits, const SamplingIo& io, const Tensor& ids) override;
    void do_adjust_logits(const Tensor& logits, const LogitAdjustIo& io) override;
    void do_advance_decode(const Tensor& sampled, const DecodeState& st) override;
    void do_kv_slots(const Tensor& positions, const Tensor& block_tables, int block_size, const Tensor& slots) override;
    void do_dsa_topk(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                     const DsaTopkWorkspace& ws, const Tensor& indices) override;
    void do_dsa_topk_causal(const Tensor& scores, const AttentionMeta& meta, const DsaTopkWorkspace& ws,
                            const Tensor& indices) override;
    void do_dsa_indexer_paged(const Tensor& q, const Tensor& weights, const Tensor& key_cache,
                              const AttentionMeta& meta, int heads, const Tensor& scores) override;
    void do_dsa_indexer(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads,
                        const Tensor& scores) override;
    void do_sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                             const Tensor& indices, int heads, int kv_heads, int head_dim, float scale,
                             const Tensor& out) override;
    void do_moe_route(const Tensor& x, const Tensor& router, int64_t batch_rows, bool normalize, const Tensor& logits,
                      const Tensor& ids, const Tensor& weights) override;
    void do_moe_route_grouped(const Tensor& x, const Tensor& router, const Tensor& bias, int n_group, int topk_group,
                              bool normalize, float scaling, const Tensor& logits, const Tensor& ids,
                              const Tensor& weights) override;
    void do_moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, const MoeExperts& experts,
                    const Tensor& out, int64_t batch_rows) override;

    Buffer* do_alloc(size_t bytes, const std::string& name) override;
    void do_free(Buffer* b) override;
    void do_upload(const Tensor& dst, const void* src) override;
    void do_download(const Tensor& src, void* dst) override;
    void do_synchronize() override {}
    void do_begin_capture() override;
    GraphId do_end_capture() override;
    void do_replay(GraphId g) override;
    void do_destroy_graph(GraphId g) override;

   private:
    // Runs the op now, or appends it to the graph being recorded; `fp` decides whether the recorded
    // op needs a barrier before it. fn takes an OpWorker after its range where it needs one.
    template <typename Args, typename... Worker>
    void submit(void (*fn)(const Args&, int64_t, int64_t, Worker...), const Args& args, const Footprint& fp,
                int64_t items, int64_t grain = 1, int64_t chunk = 0);
    // Products of x by one to three quantized matrices of one type, sharing x's quantization (ops/matmul.cpp).
    void quant_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows);
    // The backend-owned scratch buffer called `name` with at least `need` bytes (see the definition).
    Buffer* scratch_buffer(const char* name, size_t need);
    // dsa_topk (the window arrays given) and dsa_topk_causal (meta given) as one kernel (ops/dsa.cpp).
    void submit_topk(const Tensor& scores, const Tensor* window_start, const Tensor* window_end,
                     const AttentionMeta* meta, const DsaTopkWorkspace& ws, const Tensor& indices);

    // A buffer and the mapping it lies in (which may start before it and be longer, for alignment).
    struct CpuBuffer : Buffer {
        void* map_base = nullptr;
        size_t map_bytes = 0;
    };

    ThreadPool pool_;
    std::vector<std::unique_ptr<CpuBuffer>> buffers_;
    std::vector<CpuOp> recording_;
    Phase phase_;  // ops recorded since the last barrier
    std::vector<std::vector<CpuOp>> graphs_;
    // What the RoPE kernels need per (head_dim, theta, factors), kept for the backend's life because recorded ops
    // point into the factors (a deque never moves its elements).
    struct RopeTable {
        int head_dim = 0;
        float theta = 0.0f;
        std::vector<float> factors;
        float theta_scale = 0.0f;  // rope_theta_scale(theta, head_dim)
        const float* factors_or_null() const { return factors.empty() ? nullptr : factors.data(); }
    };
    std::deque<RopeTable> rope_tables_;
    const RopeTable& rope_table(int head_dim, const RopeSpec& rope);
    void dispatch(const CpuOp* ops, size_t n);

    uint64_t ops_executed_ = 0;
    uint64_t eager_ops_ = 0;
    uint64_t busy_ns_ = 0;
};

}  // namespace tracelm::cpu
