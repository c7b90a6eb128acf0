// The Vulkan backend: the Backend interface on one Vulkan device (a GPU, or Mesa's lavapipe on the CPU, where CI runs
// it). Plain C++ (no Vulkan types), so host code built with TRACELM_HAVE_VULKAN can include it.
//
// Memory: one device-local VkBuffer per Buffer; upload and download go through a host-visible staging buffer and
// wait for the queue (never inside capture: see backend.cpp). A freed buffer that a live graph may refer to is
// destroyed only once no graph is alive. Buffer::data stays null: shaders reach a buffer through its descriptor, and
// tensor offsets travel in push constants. A buffer may be larger than one binding (maxStorageBufferRange): embedding
// and the matmuls read such a weight in windows of rows, a dispatch each; any other op refuses it by name.
//
// Ops are compute dispatches (copy is vkCmdCopyBuffer), each after a pipeline barrier on the previous ones. Eagerly
// they are recorded into one command buffer that is submitted when the host next needs the queue (upload, download,
// synchronize, replay). Capture records them into a command buffer of their own, submitted as it is by each
// replay; the host waits only in download and synchronize. Shaders are GLSL compiled to SPIR-V at build time
// (shaders/*.comp); variants (weight type, activation) are specialisation constants.
//
// A lost device (VK_ERROR_DEVICE_LOST) or one that does not finish within options.wait_timeout_s is a
// std::runtime_error from the call that waits, naming it.
//
// Validation: with options.validation (or TRACELM_VULKAN_VALIDATION=1 in the environment) the instance enables
// VK_LAYER_KHRONOS_validation, and every warning or error it reports is kept in validation_messages().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/vulkan/capabilities.h"
#include "runtime/backend.h"

namespace tracelm::vulkan {

// Empty when this process can use a Vulkan device; otherwise why not ("no Vulkan device: ...").
std::string unavailable_reason();
// "0: llvmpipe (LLVM 15.0.6, 256 bits) (cpu, 31.3 GiB device-local)", one line per device. The device-local heap
// (memory_capacity()) is capped by TRACELM_VULKAN_HEAP_LIMIT_BYTES where set, a testing knob.
std::vector<std::string> device_names();

struct VulkanOptions {
    int device = 0;
    // Enable the validation layer; also on when TRACELM_VULKAN_VALIDATION=1.
    bool validation = false;
    // How long the host waits for the device's work (download, synchronize) before calling the device hung.
    double wait_timeout_s = 60.0;
    // A testing knob: when non-zero, the most bytes of one buffer a shader is given (below the device's
    // maxStorageBufferRange), so that weights are bound in windows (see do_embedding, do_matmul) on small tensors too.
    size_t max_binding_bytes = 0;
};

class VulkanBackend final : public Backend {
   public:
    // Throws std::runtime_error("no Vulkan device: ...") when there is none (or no device `options.device`), and
    // names the layer when validation is asked for but not installed.
    explicit VulkanBackend(const VulkanOptions& options = {});
    ~VulkanBackend() override;
    VulkanBackend(const VulkanBackend&) = delete;
    VulkanBackend& operator=(const VulkanBackend&) = delete;

    std::string name() const override { return "vulkan"; }
    const BackendCapabilities& capabilities() const override { return vulkan::capabilities(); }
    bool supports_capture() const override { return true; }
    // The device's largest device-local heap (see device_names()).
    std::optional<size_t> memory_capacity() const override;
    // Dispatches and copies one replay of g runs.
    size_t graph_nodes(GraphId g) const override;
    std::string device_name() const;
    bool validation() const;
    // What the validation layer reported so far (severity and message), when it is on.
    std::vector<std::string> validation_messages() const;
    // Host allocations Vulkan drivers made on the calling thread so far, through the allocation callbacks tracelm gives
    // every device.
    static uint64_t driver_allocations_on_this_thread();

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
    // rope_neox, then x *= post_scale (qk_norm_rope_kv_write's q_scale).
    void rope(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope, float post_scale);
    // attention, or sparse_attention with indices.
    void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                         const Tensor* indices, int heads, int kv_heads, int head_dim, float scale, const Tensor& out);
    // matmul by GGML's 32-element block weights: x quantized to Q8_0 / Q8_1 blocks, then ggml's vec_dot order.
    void quantized_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out, int64_t batch_rows);
    struct Impl;  // keeps Vulkan types out of this header
    std::unique_ptr<Impl> impl_;
};

}  // namespace tracelm::vulkan
