#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <stdexcept>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/dsa_topk_cuda.h"
#include "backends/cuda/sampling_cuda.h"
#include "ops/dsa/dsa_indexer.h"
#include "ops/dsa/dsa_topk.h"

namespace tracelm::cuda {

namespace {

// Quantized weights have no CUDA kernels yet; say so by name rather than as a generic dtype error.
// What the kernels need for the angles of runtime/rope.h (the launch carries it by value); a pair without a
// factor divides by 1, which leaves its angle exact.
ops::RopeFreqs rope_freqs(int head_dim, const RopeSpec& rope) {
    ops::RopeFreqs f{};
    f.theta_scale = rope_theta_scale(rope.theta, head_dim);
    for (int i = 0; i < head_dim / 2; ++i)
        f.factors[i] = rope.factors.empty() ? 1.0f : rope.factors[static_cast<size_t>(i)];
    return f;
}

// cudaMalloc returns 256-byte aligned blocks; sizes are rounded the same way so that blocks are reusable.
constexpr size_t kGranule = 256;

}  // namespace

std::string unavailable_reason() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();  // clears the error for later calls
        return std::string("no CUDA device: ") + cudaGetErrorString(e);
    }
    return n == 0 ? "no CUDA device: none found" : "";
}

struct CudaBackend::Impl {
    cudaStream_t stream = nullptr;
    std::string device;

    // ---- the block pool ----
    std::map<void*, size_t> blocks;           // every block cudaMalloc'd, with its size
    std::multimap<size_t, void*> free_blocks;  // reusable now, by size
    std::vector<void*> held;                   // freed while a graph was alive: may still be referenced
    int live_graphs = 0;

    void* take(size_t bytes, const std::string& name) {
        const size_t size = (std::max<size_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule;
        // Best fit, but not into a block more than twice the request (that memory would be lost to it).
        auto it = free_blocks.lower_bound(size);
        if (it != free_blocks.end() && it->first <= 2 * size) {
            void* p = it->second;
            free_blocks.erase(it);
            return p;
        }
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, size);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            throw std::runtime_error("cuda backend: cannot allocate " + std::to_string(bytes) + " bytes for '" + name +
                                     "': " + cudaGetErrorString(e));
        }
        blocks.emplace(p, size);
        return p;
    }

    void give_back(void* p) {
        if (live_graphs > 0) {
            held.push_back(p);
        } else {
            free_blocks.emplace(blocks.at(p), p);
        }
    }

    // ---- buffers and graphs ----
    std::vector<std::unique_ptr<Buffer>> buffers;
    struct Graph {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        size_t nodes = 0;
    };
    std::vector<Graph> graphs;

    // Split-attention scratch, grown by eager calls only.
    float* scratch = nullptr;
    size_t scratch_bytes = 0;
};

CudaBackend::CudaBackend() : impl_(std::make_unique<Impl>()) {
    const std::string why = unavailable_reason();
    if (!why.empty()) throw std::runtime_error(why);
    check(cudaSetDevice(0), "set device");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "device properties");
    impl_->device = prop.name;
    ops::init(static_cast<int>(prop.sharedMemPerBlockOptin));
    check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "stream create");
}

CudaBackend::~CudaBackend() {
    // Errors are ignored: nothing can be done about them in a destructor.
    cudaStreamSynchronize(impl_->stream);
    for (auto& g : impl_->graphs) {
        if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
        if (g.graph != nullptr) cudaGraphDestroy(g.graph);
    }
    for (auto& [p, size] : impl_->blocks) cudaFree(p);
    cudaStreamDestroy(impl_->stream);
}

std::string CudaBackend::device_name() const { return impl_->device; }

size_t CudaBackend::pool_bytes() const {
    size_t total = 0;
    for (const auto& [p, size] : impl_->blocks) total += size;
    return total;
}

double CudaBackend::measure_copy_bandwidth(size_t bytes) {
    if (capturing()) throw CaptureViolation("capture violation: measure_copy_bandwidth inside captured region");
    void* a = impl_->take(bytes, "bandwidth.src");
    void* b = impl_->take(bytes, "bandwidth.dst");
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    check(cudaEventCreate(&e0), "event create");
    check(cudaEventCreate(&e1), "event create");
    float best_ms = 0.0f;
    for (int rep = 0; rep < 11; ++rep) {
        check(cudaEventRecord(e0, impl_->stream), "event record");
        check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, impl_->stream), "bandwidth copy");
        check(cudaEventRecord(e1, impl_->stream), "event record");
        check(cudaEventSynchronize(e1), "event sync");
        float ms = 0.0f;
        check(cudaEventElapsedTime(&ms, e0, e1), "event time");
        if (rep > 0 && (best_ms == 0.0f || ms < best_ms)) best_ms = ms;  // rep 0 warms up
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    impl_->give_back(a);
    impl_->give_back(b);
    return 2.0 * static_cast<double>(bytes) / (static_cast<double>(best_ms) * 1e-3);
}

// ---- memory ----

Buffer* CudaBackend::do_alloc(size_t bytes, const std::string& name) {
    auto b = std::make_unique<Buffer>();
    b->data = impl_->take(bytes, name);
    // Zeroed, as the CPU backend's fresh pages are: a row no step has written yet (a padded row's penalty counts,
    // say) then reads the same on every backend and in every run.
    if (bytes > 0) {
        check(cudaMemsetAsync(b->data, 0, bytes, impl_->stream), "alloc");
        check(cudaStreamSynchronize(impl_->stream), "alloc");
    }
    b->bytes = bytes;
    b->name = name;
    impl_->buffers.push_back(std::move(b));
    return impl_->buffers.back().get();
}

void CudaBackend::do_free(Buffer* b) {
    auto& bufs = impl_->buffers;
    auto it = std::find_if(bufs.begin(), bufs.end(), [&](const auto& p) { return p.get() == b; });
    if (it == bufs.end()) throw std::invalid_argument("cuda backend: free of unknown buffer");
    impl_->give_back(b->data);
    bufs.erase(it);
}

void CudaBackend::do_upload(const Tensor& dst, const void* src) {
    check(cudaMemcpyAsync(dst.raw(), src, dst.nbytes(), cudaMemcpyHostToDevice, impl_->stream), "upload");
    check(cudaStreamSynchronize(impl_->stream), "upload");
}

void CudaBackend::do_download(const Tensor& src, void* dst) {
    check(cudaMemcpyAsync(dst, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, impl_->stream), "download");
    check(cudaStreamSynchronize(impl_->stream), "download");
}

void CudaBackend::do_synchronize() { check(cudaStreamSynchronize(impl_->stream), "synchronize"); }

// ---- graphs ----

void CudaBackend::do_begin_capture() {
    // Thread-local mode: an unsafe call (cudaMalloc, a synchronisation) from this thread fails the capture.
    check(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal), "begin capture");
}

GraphId CudaBackend::do_end_capture() {
    Impl::Graph g;
    check(cudaStreamEndCapture(impl_->stream, &g.graph), "end capture");
    const cudaError_t e = cudaGraphGetNodes(g.graph, nullptr, &g.nodes);
    const cudaError_t i = e == cudaSuccess ? cudaGraphInstantiate(&g.exec, g.graph, 0) : e;
    if (i != cudaSuccess) {
        cudaGraphDestroy(g.graph);
        check(i, "graph instantiate");
    }
    impl_->graphs.push_back(g);
    ++impl_->live_graphs;
    return static_cast<GraphId>(impl_->graphs.size() - 1);
}

void CudaBackend::do_replay(GraphId g) {
    if (g < 0 || static_cast<size_t>(g) >= impl_->graphs.size() || impl_->graphs[static_cast<size_t>(g)].exec == nullptr)
        throw std::invalid_argument("replay of unknown graph");
    check(cudaGraphLaunch(impl_->graphs[static_cast<size_t>(g)].exec, impl_->stream), "graph launch");
}

void CudaBackend::do_destroy_graph(GraphId g) {
    if (g < 0 || static_cast<size_t>(g) >= impl_->graphs.size() || impl_->graphs[static_cast<size_t>(g)].exec == nullptr)
        throw std::invalid_argument("destroy of unknown graph");
    // The graph may still be running; its blocks are released to the pool only after it finishes.
    check(cudaStreamSynchronize(impl_->stream), "destroy graph");
    Impl::Graph& rec = impl_->graphs[static_cast<size_t>(g)];
    cudaGraphExecDestroy(rec.exec);
    cudaGraphDestroy(rec.graph);
    rec = {};
    if (--impl_->live_graphs == 0) {
        for (void* p : impl_->held) impl_->free_blocks.emplace(impl_->blocks.at(p), p);
        impl_->held.clear();
    }
}

size_t CudaBackend::graph_nodes(GraphId g) const { return impl_->graphs.at(static_cast<size_t>(g)).nodes; }

// ---- ops ----

void CudaBackend::do_copy(const Tensor& dst, const Tensor& src) {
    if (dst.nbytes() == 0) return;
    check(cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), cudaMemcpyDeviceToDevice, impl_->stream), "copy");
}

void CudaBackend::do_embedding(const Tensor& ids, const Tensor& table, float scale, const Tensor& out) {
    ops::embedding(ids.ptr<int32_t>(), out.rows, table.raw(), table.dtype, table.rows, table.cols, scale,
                   out.ptr<float>(), impl_->stream);
}

void CudaBackend::do_rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
    ops::rms_norm(x.ptr<float>(), w.raw(), w.dtype, eps, out.ptr<float>(), x.rows, x.cols, impl_->stream);
}

void CudaBackend::do_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& out) {
    ops::layer_norm(x.ptr<float>(), w.raw(), b.raw(), w.dtype, eps, out.ptr<float>(), x.rows, x.cols, impl_->stream);
}

// batch_rows picks ggml's summation order on the CPU; this backend's numbers are its own.
void CudaBackend::do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out, int64_t) {
    ops::matmul(x.ptr<float>(), x.rows, x.cols, w.raw(), w.dtype, bias ? bias->ptr<float>() : nullptr, out.ptr<float>(),
                w.rows, impl_->stream);
}

void CudaBackend::do_rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim,
                               const RopeSpec& rope, int head_stride) {
    ops::rope_neox(x.ptr<float>(), positions.ptr<int32_t>(), x.rows, heads, head_dim, head_stride,
                   rope_freqs(head_dim, rope), impl_->stream);
}

void CudaBackend::do_kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                           const Tensor& v_cache) {
    ops::kv_write(k.ptr<float>(), v.ptr<float>(), slot_mapping.ptr<int32_t>(), k_cache.raw(), v_cache.raw(),
                  k_cache.dtype, k.rows, k.cols, k_cache.rows, impl_->stream);
}

void CudaBackend::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const AttentionMeta& meta, const Tensor* indices, int heads, int kv_heads,
                                  int head_dim, float scale, const Tensor& out, const char* op) {
    ops::AttentionParams p{q.ptr<float>(),
                           k_cache.raw(),
                           v_cache.raw(),
                           k_cache.dtype,
                           meta.block_tables.ptr<int32_t>(),
                           meta.seq_lens.ptr<int32_t>(),
                           meta.query_start_loc.ptr<int32_t>(),
                           out.ptr<float>(),
                           indices != nullptr ? indices->ptr<int64_t>() : nullptr,
                           indices != nullptr ? indices->cols : 0,
                           q.rows,
                           k_cache.rows,
                           meta.num_seqs,
                           static_cast<int>(meta.block_tables.cols),
                           meta.block_size,
                           heads,
                           kv_heads,
                           head_dim,
                           scale,
                           meta.window};
    const int splits = ops::attention_splits(p);
    const size_t need = static_cast<size_t>(ops::attention_scratch_floats(p, splits)) * sizeof(float);
    if (need > impl_->scratch_bytes) {
        if (capturing()) {
            throw std::logic_error(std::string(op) + ": needs " + std::to_string(need) +
                                   " bytes of split scratch that no eager call made; run the step eagerly before "
                                   "capturing it");
        }
        if (impl_->scratch != nullptr) impl_->give_back(impl_->scratch);
        impl_->scratch = static_cast<float*>(impl_->take(need, "attention.scratch"));
        impl_->scratch_bytes = need;
    }
    ops::attention(p, splits, impl_->scratch, impl_->stream);
}

void CudaBackend::do_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                            int heads, int kv_heads, int head_dim, float scale, const Tensor& out) {
    paged_attention(q, k_cache, v_cache, meta, nullptr, heads, kv_heads, head_dim, scale, out, "attention");
}

void CudaBackend::do_sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                   const AttentionMeta& meta, const Tensor& indices, int heads, int kv_heads,
                                   int head_dim, float scale, const Tensor& out) {
    paged_attention(q, k_cache, v_cache, meta, &indices, heads, kv_heads, head_dim, scale, out, "sparse_attention");
}

void CudaBackend::do_cache_write(std::span<const Tensor> parts, const Tensor& slot_mapping, const Tensor& cache) {
    ops::CacheWriteParts p{};
    for (size_t i = 0; i < parts.size(); ++i) {
        p.parts[i] = parts[i].ptr<float>();
        p.widths[i] = parts[i].cols;
    }
    p.count = static_cast<int>(parts.size());
    ops::cache_write(p, slot_mapping.ptr<int32_t>(), slot_mapping.numel(), cache.raw(), cache.dtype, cache.cols,
                     cache.rows, impl_->stream);
}

void CudaBackend::do_mla_absorb(const Tensor& x, const Tensor& w, int heads, const Tensor& out) {
    ops::mla_absorb(x.ptr<float>(), x.rows, heads, x.cols / heads, w.raw(), w.dtype, w.rows / heads,
                    out.ptr<float>(), impl_->stream);
}

void CudaBackend::do_mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Tensor& cache,
                                   const AttentionMeta& meta, const Tensor* indices, int heads, float scale,
                                   const Tensor& out) {
    if (cache.cols > ops::kMaxLatentRow)
        throw std::invalid_argument("mla_attention: cache rows wider than " + std::to_string(ops::kMaxLatentRow));
    ops::mla_attention({q_lat.ptr<float>(), q_pe.ptr<float>(), cache.raw(), meta.block_tables.ptr<int32_t>(),
                        meta.seq_lens.ptr<int32_t>(), meta.query_start_loc.ptr<int32_t>(),
                        indices ? indices->ptr<int64_t>() : nullptr, out.ptr<float>(), cache.rows,
                        indices ? indices->cols : 0, meta.num_seqs, static_cast<int>(meta.block_tables.cols),
                        meta.block_size, heads, static_cast<int>(q_lat.cols / heads),
                        static_cast<int>(q_pe.cols / heads), scale},
                       q_lat.rows, cache.dtype, impl_->stream);
}

// Mixture-of-experts ops are not on this backend yet (capabilities().moe is false, so no MoE model loads here),
// but for DeepSeek's routing.
void CudaBackend::do_moe_route(const Tensor&, const Tensor&, int64_t, bool, const Tensor&, const Tensor&,
                               const Tensor&) {
    throw std::runtime_error("moe_route: the CUDA backend has no mixture-of-experts ops yet");
}

void CudaBackend::do_moe_ffn(const Tensor&, const Tensor&, const Tensor&, const MoeExperts&, const Tensor&, int64_t) {
    throw std::runtime_error("moe_ffn: the CUDA backend has no mixture-of-experts ops yet");
}

void CudaBackend::do_moe_route_grouped(const Tensor& x, const Tensor& router, const Tensor& bias, int n_group,
                                       int topk_group, bool normalize, float scaling, const Tensor& logits,
                                       const Tensor& ids, const Tensor& weights) {
    ops::moe_route_grouped({x.ptr<float>(), router.ptr<float>(), bias.ptr<float>(), logits.ptr<float>(),
                            ids.ptr<int32_t>(), weights.ptr<float>(), x.rows, router.rows, x.cols, ids.cols, n_group,
                            topk_group, normalize, scaling},
                           impl_->stream);
}

void CudaBackend::do_add(const Tensor& a, const Tensor& b, const Tensor& out) {
    ops::add(a.ptr<float>(), b.ptr<float>(), out.ptr<float>(), out.numel(), impl_->stream);
}

void CudaBackend::do_glu(const Tensor& gate, const Tensor& up, Activation act, const Tensor& out) {
    ops::glu(gate.ptr<float>(), up.ptr<float>(), act, out.ptr<float>(), out.numel(), impl_->stream);
}

void CudaBackend::do_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t) {
    static_assert(std::size(ops::GemvSegments{}.w) >= Backend::kMaxMatmuls);
    bool fuse = x.rows <= ops::kGemvMaxT;
    for (const MatmulOut& o : outs) fuse = fuse && o.w->dtype == outs[0].w->dtype;
    if (!fuse) {
        for (const MatmulOut& o : outs) matmul(x, *o.w, o.bias, o.out);
        return;
    }
    ops::GemvSegments g{};
    for (const MatmulOut& o : outs) {
        g.w[g.count] = o.w->raw();
        g.bias[g.count] = o.bias ? o.bias->ptr<float>() : nullptr;
        g.y[g.count] = o.out.ptr<float>();
        g.rows[g.count] = o.w->rows;
        ++g.count;
    }
    ops::gemv(x.ptr<float>(), x.rows, x.cols, g, outs[0].w->dtype, impl_->stream);
}

void CudaBackend::do_add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out) {
    ops::add_rms_norm(x.ptr<float>(), delta.ptr<float>(), w.raw(), w.dtype, eps, out.ptr<float>(), x.rows, x.cols,
                      impl_->stream);
}

void CudaBackend::do_qk_norm_rope_kv_write(const QkvPrologue& p) {
    ops::qk_norm_rope_kv_write({p.q.ptr<float>(), p.k.ptr<float>(), p.v.ptr<float>(),
                                p.q_norm ? p.q_norm->raw() : nullptr, p.k_norm ? p.k_norm->raw() : nullptr,
                                p.q_norm ? p.q_norm->dtype : DType::F32, p.eps, p.positions.ptr<int32_t>(),
                                p.slot_mapping.ptr<int32_t>(), p.k_cache.raw(), p.v_cache.raw(), p.k_cache.dtype,
                                p.q.rows, p.k_cache.rows, p.heads, p.kv_heads, p.head_dim, p.q_scale},
                               rope_freqs(p.head_dim, p.rope), impl_->stream);
}

void CudaBackend::do_glu_matmul(const Tensor& gate, const Tensor& up, Activation act, const Tensor& w,
                                const Tensor& out, int64_t) {
    if (!ops::glu_matmul_fuses(gate.rows, gate.cols)) {
        // Prefill-sized batches take the tiled GEMM, which reads its input from memory: form it in gate first.
        glu(gate, up, act, gate);
        matmul(gate, w, nullptr, out);
        return;
    }
    ops::glu_matmul(gate.ptr<float>(), up.ptr<float>(), act, gate.rows, gate.cols, w.raw(), w.dtype,
                    out.ptr<float>(), w.rows, impl_->stream);
}

void CudaBackend::do_gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out) {
    ops::gather_last(x.ptr<float>(), query_start_loc.ptr<int32_t>(), out.ptr<float>(), x.rows, x.cols, out.rows,
                     impl_->stream);
}

void CudaBackend::do_argmax(const Tensor& logits, const Tensor& ids) {
    ops::argmax(logits.ptr<float>(), ids.ptr<int32_t>(), logits.rows, logits.cols, impl_->stream);
}

size_t CudaBackend::sampling_workspace_bytes(int64_t max_rows, int64_t vocab) const {
    return cuda::sampling_workspace_bytes(max_rows, vocab);
}

void CudaBackend::do_sample(const Tensor& logits, const SamplingIo& io, const Tensor& ids) {
    cuda::sample({logits.ptr<float>(), reinterpret_cast<const sampling::RowParams*>(io.params.raw()),
                  io.counts.ptr<int32_t>(), io.step.ptr<int32_t>(), io.step_offset, ids.ptr<int32_t>(),
                  io.logprobs.ptr<float>(), io.top_ids.ptr<int32_t>(), static_cast<int32_t*>(io.ws.buffer->data),
                  logits.cols},
                 logits.rows, impl_->stream);
}

void CudaBackend::do_adjust_logits(const Tensor& logits, const LogitAdjustIo& io) {
    cuda::adjust_logits({logits.ptr<float>(), io.flags.ptr<int32_t>(), reinterpret_cast<const uint32_t*>(io.mask.raw()),
                         io.bias_ids.ptr<int32_t>(), io.bias_values.ptr<float>(), logits.cols, io.mask.cols},
                        logits.rows, impl_->stream);
}

void CudaBackend::do_advance_decode(const Tensor& sampled, const DecodeState& st) {
    ops::advance_decode({sampled.ptr<int32_t>(), st.token_ids.ptr<int32_t>(), st.positions.ptr<int32_t>(),
                         st.slot_mapping.ptr<int32_t>(), st.seq_lens.ptr<int32_t>(), st.block_tables.ptr<int32_t>(),
                         st.step.ptr<int32_t>(), st.history.ptr<int32_t>(), st.history.rows,
                         static_cast<int>(st.token_ids.numel()), static_cast<int>(st.block_tables.cols),
                         st.block_size},
                        impl_->stream);
}

void CudaBackend::do_kv_slots(const Tensor& positions, const Tensor& block_tables, int block_size,
                              const Tensor& slots) {
    ops::kv_slots(positions.ptr<int32_t>(), block_tables.ptr<int32_t>(), slots.ptr<int32_t>(), slots.numel(),
                  static_cast<int>(block_tables.cols), block_size, impl_->stream);
}

size_t CudaBackend::dsa_topk_workspace_bytes(int64_t max_rows, int64_t max_keys) const {
    return cuda::dsa_topk_workspace_bytes(max_rows, max_keys);
}

void CudaBackend::do_dsa_topk(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                           const DsaTopkWorkspace& ws, const Tensor& indices) {
    cuda::dsa_topk({scores.ptr<float>(), window_start.ptr<int64_t>(), window_end.ptr<int64_t>(), indices.ptr<int64_t>(),
                    ws.buffer->data, ws.buffer->bytes, scores.rows, scores.cols, indices.cols, {}},
                   impl_->stream);
}

void CudaBackend::do_dsa_topk_causal(const Tensor& scores, const AttentionMeta& meta, const DsaTopkWorkspace& ws,
                                     const Tensor& indices) {
    cuda::dsa_topk({scores.ptr<float>(), nullptr, nullptr, indices.ptr<int64_t>(), ws.buffer->data, ws.buffer->bytes,
                    scores.rows, scores.cols, indices.cols,
                    {meta.query_start_loc.ptr<int32_t>(), meta.seq_lens.ptr<int32_t>(), meta.num_seqs}},
                   impl_->stream);
}

void CudaBackend::do_dsa_indexer_paged(const Tensor& q, const Tensor& weights, const Tensor& key_cache,
                                       const AttentionMeta& meta, int heads, const Tensor& scores) {
    ops::dsa_indexer_paged({q.ptr<float>(), weights.ptr<float>(), key_cache.ptr<float>(), scores.ptr<float>(),
                            meta.query_start_loc.ptr<int32_t>(), meta.seq_lens.ptr<int32_t>(),
                            meta.block_tables.ptr<int32_t>(), q.rows, scores.cols, key_cache.rows,
                            meta.block_tables.cols, heads, key_cache.cols, meta.num_seqs, meta.block_size},
                           impl_->stream);
}

void CudaBackend::do_dsa_indexer(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads,
                              const Tensor& scores) {
    ops::dsa_indexer(q.ptr<float>(), weights.ptr<float>(), keys.ptr<float>(), scores.ptr<float>(), q.rows, keys.rows,
                     heads, keys.cols, impl_->stream);
}

}  // namespace tracelm::cuda
