// The CUDA backend: the Backend interface on one NVIDIA GPU. Plain C++ (no CUDA types), so host code built
// with TRACELM_HAVE_CUDA can include it.
//
// Memory: device blocks come from plain cudaMalloc through a pool. A freed block is reused only when no
// captured graph is alive, because a graph keeps the raw addresses it was captured with; blocks go back to
// the driver only when the backend is destroyed. Weights are uploaded to the device like any buffer.
//
// Ops are enqueued on one non-blocking stream without allocation or synchronisation; capture is
// cudaStreamBeginCapture / cudaStreamEndCapture on that stream, then cudaGraphInstantiate, and replay is
// cudaGraphLaunch. upload / download copy on the stream and wait for it (never inside capture: see
// backend.cpp). Scratch that an op needs (split attention) is sized by eager calls; a captured call that
// would need more than the eager calls made throws instead of allocating.
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/capabilities.h"
#include "runtime/backend.h"

namespace tracelm::cuda {

// Empty when this process can use a CUDA device; otherwise why not ("no CUDA device: ...").
std::string unavailable_reason();

class CudaBackend final : public Backend {
   public:
    // Uses device 0; throws std::runtime_error("no CUDA device: ...") when there is none or no driver.
    CudaBackend();
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    std::string name() const override { return "cuda"; }
    const BackendCapabilities& capabilities() const override { return cuda::capabilities(); }
    bool supports_capture() const override { return true; }
    // Kernel and copy nodes one replay of g runs.
    size_t graph_nodes(GraphId g) const override;
    std::string device_name() const;
    // Device-to-device copy bandwidth in bytes moved (read plus written) per second: the best of several
    // cudaMemcpy copies of `bytes`, timed with events.
    double measure_copy_bandwidth(size_t bytes);
    // Device memory the pool holds (in use, free and held back for live graphs).
    size_t pool_bytes() const;

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
    void do_synchronize() override;
    void do_begin_capture() override;
    GraphId do_end_capture() override;
    void do_replay(GraphId g) override;
    void do_destroy_graph(GraphId g) override;

   private:
    struct Impl;  // keeps CUDA types out of this header
    std::unique_ptr<Impl> impl_;
    void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                         const Tensor* indices, int heads, int kv_heads, int head_dim, float scale, const Tensor& out,
                         const char* op);
};

}  // namespace tracelm::cuda
