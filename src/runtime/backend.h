// The device interface every backend implements (CPU reference, CUDA, and the shape a ttnn trace
// backend would take).
//
// Memory: buffers are allocated once and keep their address; a captured graph may refer to any of
// them. Step inputs are refreshed with upload() *before* a replay, never inside one.
//
// Capture: between begin_capture() and end_capture() only device ops may be issued. Host<->device
// transfers, allocation, free and synchronisation throw CaptureViolation naming the op and buffer.
// The checks live here, in the non-virtual entry points, so no backend can forget them.
//
// Ops: each is a non-virtual entry point, defined with its argument checks and its reference implementation in
// src/ops/<family>/ (docs/architecture.md, "Where an op lives"), that checks its arguments and then calls the
// backend's protected do_<op>; a backend implements only the do_ functions and cannot skip a check.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/rope.h"
#include "runtime/tensor.h"

namespace tracelm {

class CaptureViolation : public std::runtime_error {
   public:
    using std::runtime_error::runtime_error;
};

// An op a backend does not run yet: "not implemented on the <backend> backend: <op>", thrown before anything is
// enqueued (so also inside a capture, which stays usable). The op conformance suite skips such an op, naming it.
class NotImplemented : public std::runtime_error {
   public:
    using std::runtime_error::runtime_error;
};

using GraphId = int;

// Paged-attention metadata for one step (all device tensors, i32).
struct AttentionMeta {
    Tensor block_tables;     // [num_seqs, max_blocks_per_seq]
    Tensor seq_lens;         // [1, num_seqs]: cached tokens of each sequence including this step's
    Tensor query_start_loc;  // [1, num_seqs + 1]: prefix sums of query lengths
    int num_seqs = 0;
    int block_size = 0;
    // Whether llama.cpp's q/k heads are ordered as pairs (i, i + head_dim/2) of tracelm's, interleaved (the
    // llama architecture, whose GGUF rows tracelm un-permutes). An f16 cache sums q.k in llama.cpp's order.
    bool interleaved_pairs = false;
    // Sliding-window attention: a query at position p sees only positions (p - window, p] (0: every earlier one).
    int window = 0;
};

// The activation of a gated MLP: out = act(gate) * up.
enum class Activation : uint8_t {
    Silu,
    // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in f32.
    GeluTanh,
    // GELU as ggml's CPU backend evaluates it (llama.cpp's numbers): x rounded to f16 looks up an f16 table of the
    // f32 formula; 0 for x <= -10 and x for x >= 10.
    GeluTanhF16,
};
const char* activation_name(Activation a);

// Decode-step state that the graph advances on the device (all i32 device tensors, one entry per
// sequence unless said otherwise).
struct DecodeState {
    Tensor token_ids;     // [1, S] input ids of the next step
    Tensor positions;     // [1, S] position of that token
    Tensor slot_mapping;  // [1, S] KV slot that token is written to (-1: none)
    Tensor seq_lens;      // [1, S]
    Tensor block_tables;  // [S, max_blocks_per_seq]
    Tensor step;          // [1, 1] number of steps taken since seeding
    Tensor history;       // [max_steps, S] sampled ids, row `step` is written each step
    int block_size = 0;
};

// One output of Backend::matmuls.
struct MatmulOut {
    const Tensor* w = nullptr;
    const Tensor* bias = nullptr;  // may be null
    Tensor out;
};

// Arguments of Backend::qk_norm_rope_kv_write for T tokens.
struct QkvPrologue {
    Tensor q, k, v;                     // [T, heads*head_dim], [T, kv_heads*head_dim] x2 (f32); q, k updated in place
    const Tensor* q_norm = nullptr;     // per-head RMSNorm weights [head_dim] of q and k: both given or both null
    const Tensor* k_norm = nullptr;
    float eps = 0.0f;
    Tensor positions;                   // [1, T] i32
    RopeSpec rope;                      // the frequencies (theta, scaling factors)
    Tensor slot_mapping;                // [1, T] i32
    Tensor k_cache, v_cache;            // [slots, kv_heads*head_dim]
    int heads = 0, kv_heads = 0, head_dim = 0;
    // q *= q_scale after its RoPE: Gemma scales queries before attention (llama.cpp's order; the attention op then
    // scales by 1), which an f16 cache's rounding of q tells apart from scaling the scores.
    float q_scale = 1.0f;
};

// Scratch of dsa_topk for up to max_rows rows of max_keys keys, made once (outside capture) by
// dsa::make_topk_workspace in ops/dsa/dsa_topk.h.
struct DsaTopkWorkspace {
    Buffer* buffer = nullptr;
    int64_t max_rows = 0;
    int64_t max_keys = 0;
};

// The experts of one MoE layer for moe_ffn (ops/moe/moe.h): `count` experts' matrices stacked, gate and up
// [count * I, H], down [count * H, I], all of one weight type.
struct MoeExperts {
    const Tensor* gate = nullptr;
    const Tensor* up = nullptr;
    const Tensor* down = nullptr;
    int64_t count = 0;
    Activation act = Activation::Silu;
};

// Scratch of sample() for up to max_rows rows of `vocab` logits, made once (outside capture) by
// sampling::make_workspace in ops/sampling/sampling.h.
struct SamplingWorkspace {
    Buffer* buffer = nullptr;
    int64_t max_rows = 0;
    int64_t vocab = 0;
};

// The persistent device state of sample() (semantics in ops/sampling/sampling.h), R rows of V logits.
struct SamplingIo {
    Tensor params;        // [R, sampling::kParamWords] i32: each row's sampling::RowParams, written before replays
    Tensor counts;        // [R, V] i32: prompt flag and generated count of each token; sample() bumps the drawn one
    Tensor step;          // [1, 1] i32: draw number of each row is step + step_offset
    int step_offset = 0;
    Tensor logprobs;      // [R, 1 + kMaxLogprobs] f32: the chosen token's, then the best ones'
    Tensor top_ids;       // [R, kMaxLogprobs] i32: the best tokens, -1 padded
    SamplingWorkspace ws;
};

// Per-row logits adjustment before sample() (semantics in ops/sampling/sampling.h: adjust_logits): persistent
// buffers the host writes between steps, R rows of V logits.
struct LogitAdjustIo {
    Tensor flags;        // [R, 2] i32: (mask on, logit_bias entries)
    Tensor mask;         // [R, ceil(V / 32)] i32: bit i of word w allows token 32w + i (xgrammar's layout)
    Tensor bias_ids;     // [R, kMaxLogitBias] i32 (ops/sampling/sampling.h)
    Tensor bias_values;  // [R, kMaxLogitBias] f32
};

// What a backend runs. The model loader asks before it binds any weight, so an unsupported model is refused at
// load time with a message naming the backend and what it lacks; the ops' argument checks use it too.
struct BackendCapabilities {
    std::vector<DType> weight_types;  // matmul and embedding weights
    std::vector<DType> kv_types;      // KV cache values
    int max_head_dim = 0;             // rope, attention
    // The repacked weight types (the fast numerics) run faster here than GGML's own: a server's default.
    bool repacked_faster = false;
    bool moe = false;  // moe_route and moe_ffn (mixture-of-experts models)

    bool has_weight_type(DType dt) const { return std::find(weight_types.begin(), weight_types.end(), dt) != weight_types.end(); }
    bool has_kv_type(DType dt) const { return std::find(kv_types.begin(), kv_types.end(), dt) != kv_types.end(); }
    // "f32, bf16, f16", for messages.
    static std::string list(const std::vector<DType>& types);
};

class Backend {
   public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;
    virtual const BackendCapabilities& capabilities() const = 0;

    // Bytes of device memory buffers can take (a GPU's device-local heap); nullopt where they live in host memory.
    // Commands check a model and its KV cache against it before loading.
    virtual std::optional<size_t> memory_capacity() const { return std::nullopt; }

    // ---- memory (all forbidden inside capture) ----
    Buffer* alloc(size_t bytes, const std::string& name);  // a new buffer reads as zeros on every backend
    void free(Buffer* b);
    void upload(const Tensor& dst, const void* src);
    void download(const Tensor& src, void* dst);
    void synchronize();

    // ---- graphs ----
    virtual bool supports_capture() const = 0;
    void begin_capture();
    GraphId end_capture();
    void replay(GraphId g);
    void destroy_graph(GraphId g);
    bool capturing() const { return capturing_; }
    // Host writes (upload calls) so far: what a serving step costs the host besides its replay.
    uint64_t uploads() const { return uploads_; }
    // Device ops (kernels) one replay of g runs.
    virtual size_t graph_nodes(GraphId g) const = 0;

    // ---- device ops (allowed everywhere; recorded when capturing) ----
    // out[r,:] = src[r,:] (same shape, dtype); also used to seed device state.
    void copy(const Tensor& dst, const Tensor& src);
    // out[t,:] = table[ids[t],:] * scale as f32; ids outside [0, rows) give a zero row.
    void embedding(const Tensor& ids, const Tensor& table, float scale, const Tensor& out);
    // out[r,:] = x[r,:] / sqrt(mean(x[r,:]^2) + eps) * w (w: f32/bf16/f16 of length cols).
    void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out);
    // out[t,n] = sum_k x[t,k] * w[n,k] (+ bias[n]); w is [N,K] in f32/bf16/f16, bias may be null. batch_rows (>= 1):
    // the rows of the product llama.cpp would compute x's rows in, one sequence's prompt batch (1, the default: each
    // row alone, as a decode step computes it). The CPU backend sums GGML-quantized weights in the order llama.cpp's
    // MUL_MAT takes for that many rows (docs/ggml-numerics.md); nothing else depends on it.
    void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out, int64_t batch_rows = 1);
    // In place NeoX rotary embedding of x [T, heads*head_stride] at positions[t], with the frequencies of `rope`
    // for head_dim: the first head_dim elements of each head rotate (partial rotary embeddings, DeepSeek's indexer;
    // head_stride 0: head_dim, the whole head).
    void rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope,
                   int head_stride = 0);
    // k_cache/v_cache [slots, kv_dim], both f32 or both f16 (values rounded to nearest even); row t of k/v goes to
    // slot_mapping[t] (skipped when outside [0, slots)).
    void kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                  const Tensor& v_cache);
    // One pool: row t of the parts ([T, w_i] f32, at most kMaxCacheParts, side by side) goes to row
    // slot_mapping[t] of cache [slots, sum w_i] (f32 or f16, rounded to nearest even; slots outside [0, slots)
    // skipped): DeepSeek's latent and rope key, its indexer keys.
    static constexpr size_t kMaxCacheParts = 2;
    void cache_write(std::span<const Tensor> parts, const Tensor& slot_mapping, const Tensor& cache);
    // out[r,:] = (x[r,:] - mean) / sqrt(variance + eps) * w + b, mean and (biased) variance of the row; w and b of
    // one f32/bf16/f16 type, length cols; out may alias x.
    void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& out);
    // Causal paged attention. q/out [T, heads*head_dim]. Query i of a sequence with q_len new tokens
    // and seq_len cached tokens sees keys [0, seq_len - q_len + i] (with meta.window, only the last window of them),
    // those whose block is assigned (a query that sees none gives zeros). With f16 caches the CPU backend computes what
    // llama.cpp's CPU backend does (q and the probabilities rounded to f16, its dot orders and softmax).
    void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                   int heads, int kv_heads, int head_dim, float scale, const Tensor& out);
    void add(const Tensor& a, const Tensor& b, const Tensor& out);
    // out = act(gate) * up
    void glu(const Tensor& gate, const Tensor& up, Activation act, const Tensor& out);
    // ---- fused ops (each equals the composition of the ops above it names, and removes launches / barriers) ----
    // x += delta, then out = rms_norm(x, w): a residual add fused with the norm that follows it.
    void add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out);
    // The attention prologue of one layer: per-head rms_norm of p.q and p.k (when p.q_norm / p.k_norm are given),
    // rope_neox of both, q times p.q_scale, then kv_write of k and v.
    void qk_norm_rope_kv_write(const QkvPrologue& p);
    // Several matmuls of one input, outs[i].out = x . outs[i].w^T (+ outs[i].bias): the q/k/v and gate/up
    // projections, in one launch where the backend can. At most kMaxMatmuls outputs. batch_rows as for matmul.
    static constexpr size_t kMaxMatmuls = 3;
    void matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows = 1);
    // out = glu(gate, up, act) . w^T (as matmul, no bias): the down projection with its input fused. gate and up
    // are consumed: afterwards their contents are unspecified (a backend may use them as scratch). batch_rows as
    // for matmul.
    void glu_matmul(const Tensor& gate, const Tensor& up, Activation act, const Tensor& w, const Tensor& out,
                    int64_t batch_rows = 1);

    // out[s,:] = x[query_start_loc[s+1]-1, :]: the last token of each sequence (a zero row where that is not a row of x).
    void gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out);
    // ids[r] = argmax(logits[r,:]); the lowest index wins ties; NaN never wins.
    void argmax(const Tensor& logits, const Tensor& ids);
    // ---- sampling (semantics in ops/sampling/sampling.h) ----
    virtual size_t sampling_workspace_bytes(int64_t max_rows, int64_t vocab) const = 0;
    // ids[r]: row r of logits sampled with its parameters in io; penalises the logits in place.
    void sample(const Tensor& logits, const SamplingIo& io, const Tensor& ids);
    // Adds each row's logit_bias to its logits, then sets the tokens its mask (when on) forbids to -inf.
    void adjust_logits(const Tensor& logits, const LogitAdjustIo& io);
    // Feeds sampled ids into the next step: history[step] = sampled, token_ids = sampled, positions,
    // seq_lens += 1, slot from the block table (-1 past the reserved blocks), step += 1.
    void advance_decode(const Tensor& sampled, const DecodeState& st);
    // slots[s] = the KV slot of positions[s] in row s of block_tables ([S, max_blocks]; -1 where the block is
    // unassigned or past the table): the slots of the sliding-window layers' own pool in a decode step.
    void kv_slots(const Tensor& positions, const Tensor& block_tables, int block_size, const Tensor& slots);

    // ---- DeepSeek sparse attention (semantics in ops/dsa/dsa_topk.h) ----
    // Bytes DsaTopkWorkspace::buffer needs for up to max_rows rows of max_keys keys.
    virtual size_t dsa_topk_workspace_bytes(int64_t max_rows, int64_t max_keys) const = 0;
    // indices [T, topk] i64: the topk best keys of each row of scores [T, nk] f32 within
    // [window_start[t], window_end[t]) (i64), in ascending key order, -1 padded.
    void dsa_topk(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                  const DsaTopkWorkspace& ws, const Tensor& indices);
    // Indexer score: scores[t, s] = sum_h w[t, h] * relu(q[t, h*D:(h+1)*D] . keys[s, :]) with q [T, heads*D],
    // w [T, heads], keys [nk, D], scores [T, nk] (all f32).
    void dsa_indexer(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads,
                     const Tensor& scores);
    // dsa_topk with each row's window [0, seq_len - q_len + i + 1) for row i of a sequence (rows from
    // meta.query_start_loc, read on the device; an empty window for a row of no sequence): the causal top-k of a step.
    void dsa_topk_causal(const Tensor& scores, const AttentionMeta& meta, const DsaTopkWorkspace& ws,
                         const Tensor& indices);
    // dsa_indexer over a paged key cache [slots, D] (f32): row i of sequence s scores its own positions
    // 0 .. seq_len - q_len + i through the block table (meta.block_size; a position whose block is unassigned or
    // outside the pool scores -inf) into scores [T, max_keys]; the rest of each row is left unspecified. Sizes are
    // read from meta on the device, and each row costs its own context (ops/dsa/dsa_indexer.h).
    void dsa_indexer_paged(const Tensor& q, const Tensor& weights, const Tensor& key_cache, const AttentionMeta& meta,
                           int heads, const Tensor& scores);
    // attention() restricted, for each query row t, to the cached positions indices[t, :] (i64); -1 entries and
    // positions the row may not see are skipped. Given all of them in ascending order it equals attention().
    void sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                          const AttentionMeta& meta, const Tensor& indices, int heads, int kv_heads,
                          int head_dim, float scale, const Tensor& out);

    // ---- multi-head latent attention (DeepSeek; semantics in ops/mla/mla.h) ----
    // out[t, h*N + n] = sum_k x[t, h*K + k] * w[h*N + n, k]: each head's own matrix (w [heads*N, K], f32/bf16/f16),
    // the absorbed projections of the latent space.
    void mla_absorb(const Tensor& x, const Tensor& w, int heads, const Tensor& out);
    // Causal paged attention of `heads` query heads over one shared latent cache [slots, L + R] (the latent c, then
    // the rope key): score = (q_lat[h] . c + q_pe[h] . k_pe) * scale, out[h] = softmax-weighted sum of c.
    // q_lat/out [T, heads*L], q_pe [T, heads*R]. Visibility as attention(); with `indices` (i64 [T, topk], may be
    // null) only the selected positions as sparse_attention().
    void mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Tensor& cache, const AttentionMeta& meta,
                       const Tensor* indices, int heads, float scale, const Tensor& out);

    // ---- mixture of experts (semantics in ops/moe/moe.h; capabilities().moe) ----
    // logits [T, E] = x [T, H] by the f32 router [E, H] in ggml's order for batch_rows (as for matmul); ids /
    // weights [T, k]: each row's k experts, best first, and their weights.
    void moe_route(const Tensor& x, const Tensor& router, int64_t batch_rows, bool normalize, const Tensor& logits,
                   const Tensor& ids, const Tensor& weights);
    // DeepSeek's noaux_tc routing: logits [T, E] = x [T, H] by the f32 router [E, H] (each row alone, in one fixed
    // order); ids / weights [T, k]: the k best experts by sigmoid(logit) + bias within the topk_group best of n_group
    // groups, best first, and their sigmoid scores (normalised when asked) times scaling (ops/moe/moe.h).
    void moe_route_grouped(const Tensor& x, const Tensor& router, const Tensor& bias, int n_group, int topk_group,
                           bool normalize, float scaling, const Tensor& logits, const Tensor& ids,
                           const Tensor& weights);
    // out[t] = the weighted sum over row t's k experts of their SwiGLU (act-gated) FFN of x[t], in slot order;
    // batch_rows as for matmul.
    void moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, const MoeExperts& experts,
                 const Tensor& out, int64_t batch_rows = 1);

   protected:
    // The ops as each backend runs them, after the public entry points above checked their arguments.
    virtual void do_copy(const Tensor& dst, const Tensor& src) = 0;
    virtual void do_embedding(const Tensor& ids, const Tensor& table, float scale, const Tensor& out) = 0;
    virtual void do_rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) = 0;
    virtual void do_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, const Tensor& out) = 0;
    virtual void do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out,
                           int64_t batch_rows) = 0;
    virtual void do_rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim,
                              const RopeSpec& rope, int head_stride) = 0;
    virtual void do_kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                             const Tensor& v_cache) = 0;
    virtual void do_cache_write(std::span<const Tensor> parts, const Tensor& slot_mapping, const Tensor& cache) = 0;
    virtual void do_mla_absorb(const Tensor& x, const Tensor& w, int heads, const Tensor& out) = 0;
    virtual void do_mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Tensor& cache,
                                  const AttentionMeta& meta, const Tensor* indices, int heads, float scale,
                                  const Tensor& out) = 0;
    virtual void do_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                              int heads, int kv_heads, int head_dim, float scale, const Tensor& out) = 0;
    virtual void do_add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
    virtual void do_glu(const Tensor& gate, const Tensor& up, Activation act, const Tensor& out) = 0;
    virtual void do_add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps,
                                 const Tensor& out) = 0;
    virtual void do_qk_norm_rope_kv_write(const QkvPrologue& p) = 0;
    virtual void do_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows) = 0;
    virtual void do_glu_matmul(const Tensor& gate, const Tensor& up, Activation act, const Tensor& w,
                               const Tensor& out, int64_t batch_rows) = 0;
    virtual void do_gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out) = 0;
    virtual void do_argmax(const Tensor& logits, const Tensor& ids) = 0;
    virtual void do_sample(const Tensor& logits, const SamplingIo& io, const Tensor& ids) = 0;
    virtual void do_adjust_logits(const Tensor& logits, const LogitAdjustIo& io) = 0;
    virtual void do_advance_decode(const Tensor& sampled, const DecodeState& st) = 0;
    virtual void do_kv_slots(const Tensor& positions, const Tensor& block_tables, int block_size,
                             const Tensor& slots) = 0;
    virtual void do_dsa_topk(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                             const DsaTopkWorkspace& ws, const Tensor& indices) = 0;
    virtual void do_dsa_indexer(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads,
                                const Tensor& scores) = 0;
    virtual void do_dsa_topk_causal(const Tensor& scores, const AttentionMeta& meta, const DsaTopkWorkspace& ws,
                                    const Tensor& indices) = 0;
    virtual void do_dsa_indexer_paged(const Tensor& q, const Tensor& weights, const Tensor& key_cache,
                                      const AttentionMeta& meta, int heads, const Tensor& scores) = 0;
    virtual void do_sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                     const AttentionMeta& meta, const Tensor& indices, int heads, int kv_heads,
                                     int head_dim, float scale, const Tensor& out) = 0;

    virtual void do_moe_route(const Tensor& x, const Tensor& router, int64_t batch_rows, bool normalize,
                              const Tensor& logits, const Tensor& ids, const Tensor& weights) = 0;
    virtual void do_moe_route_grouped(const Tensor& x, const Tensor& router, const Tensor& bias, int n_group,
                                      int topk_group, bool normalize, float scaling, const Tensor& logits,
                                      const Tensor& ids, const Tensor& weights) = 0;
    virtual void do_moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, const MoeExperts& experts,
                            const Tensor& out, int64_t batch_rows) = 0;

    virtual Buffer* do_alloc(size_t bytes, const std::string& name) = 0;
    virtual void do_free(Buffer* b) = 0;
    virtual void do_upload(const Tensor& dst, const void* src) = 0;
    virtual void do_download(const Tensor& src, void* dst) = 0;
    virtual void do_synchronize() = 0;
    virtual void do_begin_capture() = 0;
    virtual GraphId do_end_capture() = 0;
    virtual void do_replay(GraphId g) = 0;
    virtual void do_destroy_graph(GraphId g) = 0;

   private:
    [[noreturn]] void violation(const std::string& what, const std::string& buffer) const;
    bool capturing_ = false;
    uint64_t uploads_ = 0;
};

}  // namespace tracelm
