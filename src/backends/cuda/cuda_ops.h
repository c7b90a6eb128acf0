// Kernel launchers of the CUDA backend (one .cu per op family: elementwise, norm_rope, matmul, attention,
// decode_state, dsa, moe), for cuda_backend.cu only. Each enqueues on `stream`
// without allocating or synchronising, so it can be captured; arguments were checked by the caller. A failed
// launch throws std::runtime_error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/capabilities.h"
#include "runtime/dtype.h"

namespace tracelm::cuda::ops {

void embedding(const int32_t* ids, int64_t T, const void* table, DType dt, int64_t vocab, int64_t dim, float scale,
               float* out, cudaStream_t stream);
void rms_norm(const float* x, const void* w, DType wt, float eps, float* out, int64_t rows, int64_t cols,
              cudaStream_t stream);
// y[t, n] = sum_k x[t, k] * w[n, k] (+ bias[n]), f32 accumulation: gemv() for T <= kGemvMaxT (decode
// batches), a tiled kernel above.
void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            cudaStream_t stream);

// Largest T gemv() takes.
constexpr int64_t kGemvMaxT = 32;
// Up to three matrices of one weight type and input width, each with its bias (may be null) and output.
struct GemvSegments {
    const void* w[3];
    const float* bias[3];
    float* y[3];
    int64_t rows[3];
    int count;
};
// Every segment's y = x . w^T (+ bias) in one launch: a warp per output row. T <= kGemvMaxT.
void gemv(const float* x, int64_t T, int64_t K, const GemvSegments& g, DType wt, cudaStream_t stream);

using cuda::kMaxHeadDim;
// Inverse RoPE frequencies, passed by value so that a captured launch carries them.
struct RopeFreqs {
    float theta_scale;
    float factors[kMaxHeadDim / 2];
};
void rope_neox(float* x, const int32_t* positions, int64_t T, int heads, int head_dim, int head_stride, const RopeFreqs& f,
               cudaStream_t stream);
// k_cache/v_cache hold kv_dt values: f32, or f16 rounded to nearest even.
void kv_write(const float* k, const float* v, const int32_t* slots, void* k_cache, void* v_cache, DType kv_dt,
              int64_t T, int64_t dim, int64_t num_slots, cudaStream_t stream);

// Up to Backend::kMaxCacheParts f32 parts [T, widths[i]] written side by side into one cache row.
struct CacheWriteParts {
    const float* parts[2];
    int64_t widths[2];
    int count;
};
void cache_write(const CacheWriteParts& parts, const int32_t* slots, int64_t T, void* cache, DType kv_dt,
                 int64_t width, int64_t num_slots, cudaStream_t stream);
// Per-head products out[t, h*N + n] = x[t, h*K:] . w[h*N + n, :] (w f32/bf16/f16).
void mla_absorb(const float* x, int64_t T, int heads, int64_t K, const void* w, DType wt, int64_t N, float* out,
                cudaStream_t stream);
// Widest latent cache row (latent + rope) mla_attention takes.
constexpr int64_t kMaxLatentRow = 1024;
struct MlaParams {
    const float* q_lat;
    const float* q_pe;
    const void* cache;
    const int32_t* block_tables;
    const int32_t* seq_lens;
    const int32_t* query_start;
    const int64_t* indices;  // null: dense
    float* out;
    int64_t num_slots, topk;
    int num_seqs, max_blocks, block_size, heads, latent, rope;
    float scale;
};
void mla_attention(const MlaParams& p, int64_t T, DType kv_dt, cudaStream_t stream);

struct AttentionParams {
    const float* q;               // [T, heads*head_dim]
    const void* k_cache;          // [num_slots, kv_heads*head_dim] of kv_dt (f32 or f16)
    const void* v_cache;
    DType kv_dt;
    const int32_t* block_tables;  // [num_seqs, max_blocks]
    const int32_t* seq_lens;      // [num_seqs]
    const int32_t* query_start;   // [num_seqs + 1]
    float* out;                   // [T, heads*head_dim]
    const int64_t* indices;       // sparse attention: [T, topk] positions; null for dense attention
    int64_t topk;
    int64_t T, num_slots;
    int num_seqs, max_blocks, block_size, heads, kv_heads, head_dim;
    float scale;
    int window;  // sliding window (AttentionMeta::window), 0: none
};
// Splits of the key range attention() uses for these parameters (1: no scratch needed).
int attention_splits(const AttentionParams& p);
// Floats of scratch attention() needs with `splits` splits.
int64_t attention_scratch_floats(const AttentionParams& p, int splits);
// Paged (or, with indices, sparse) causal attention; with splits > 1 each split writes a partial softmax to
// `scratch` and a second kernel merges them.
// f16 caches are read widened to f32, in this kernel's own order (not llama.cpp's, which the CPU backend reproduces).
void attention(const AttentionParams& p, int splits, float* scratch, cudaStream_t stream);

// out = layer_norm(x; w, b) (w and b of type wt), one block per row.
void layer_norm(const float* x, const void* w, const void* b, DType wt, float eps, float* out, int64_t rows,
                int64_t cols, cudaStream_t stream);

// x += delta, then out = rms_norm(x) * w, one block per row.
void add_rms_norm(float* x, const float* delta, const void* w, DType wt, float eps, float* out, int64_t rows,
                  int64_t cols, cudaStream_t stream);

struct QkvPrologueParams {
    float* q;                 // [T, heads*head_dim], updated in place
    float* k;                 // [T, kv_heads*head_dim], updated in place
    const float* v;
    const void* q_norm;       // null: no per-head norm
    const void* k_norm;
    DType norm_dt;
    float eps;
    const int32_t* positions;
    const int32_t* slots;
    void* k_cache;            // of kv_dt (f32 or f16)
    void* v_cache;
    DType kv_dt;
    int64_t T, num_slots;
    int heads, kv_heads, head_dim;
    float q_scale;
};
// Per-head norm, NeoX RoPE of q and k, and the k/v cache write, in one launch (a block per token and head).
void qk_norm_rope_kv_write(const QkvPrologueParams& p, const RopeFreqs& f, cudaStream_t stream);

// Lets the kernels that need it use up to `max_dynamic_shared_bytes` of shared memory per block (the device's
// opt-in limit). Called once when the backend is made, so launch paths only enqueue.
void init(int max_dynamic_shared_bytes);
// Whether glu_matmul can fuse for T tokens of K inputs (its GEMV keeps act(gate)*up of a few tokens in shared
// memory); otherwise the caller runs glu then matmul.
bool glu_matmul_fuses(int64_t T, int64_t K);
// y[t, n] = sum_k act(gate[t, k]) * up[t, k] * w[n, k], for glu_matmul_fuses(T, K).
void glu_matmul(const float* gate, const float* up, Activation act, int64_t T, int64_t K, const void* w, DType wt,
                float* y, int64_t N, cudaStream_t stream);

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
void glu(const float* gate, const float* up, Activation act, float* out, int64_t n, cudaStream_t stream);
void gather_last(const float* x, const int32_t* query_start, float* out, int64_t rows, int64_t cols, int64_t seqs,
                 cudaStream_t stream);
void argmax(const float* logits, int32_t* ids, int64_t rows, int64_t cols, cudaStream_t stream);

struct AdvanceParams {
    const int32_t* sampled;
    int32_t* token_ids;
    int32_t* positions;
    int32_t* slots;
    int32_t* seq_lens;
    const int32_t* block_tables;
    int32_t* step;
    int32_t* history;
    int64_t history_rows;
    int num_seqs, max_blocks, block_size;
};
void advance_decode(const AdvanceParams& p, cudaStream_t stream);
void kv_slots(const int32_t* positions, const int32_t* block_tables, int32_t* slots, int64_t rows, int max_blocks,
              int block_size, cudaStream_t stream);

void dsa_indexer(const float* q, const float* weights, const float* keys, float* scores, int64_t rows,
                 int64_t num_keys, int64_t heads, int64_t dim, cudaStream_t stream);

// dsa_indexer_paged (ops/dsa/dsa_indexer.h): meta's device arrays as given to attention.
struct PagedIndexerParams {
    const float* q;
    const float* weights;
    const float* key_cache;
    float* scores;
    const int32_t* query_start;
    const int32_t* seq_lens;
    const int32_t* block_tables;
    int64_t rows, max_keys, num_slots, max_blocks, heads, dim;
    int num_seqs, block_size;
};
void dsa_indexer_paged(const PagedIndexerParams& p, cudaStream_t stream);

// moe_route_grouped (ops/moe/moe.h), one block per row.
struct GroupedRouteParams {
    const float* x;
    const float* router;
    const float* bias;
    float* logits;
    int32_t* ids;
    float* weights;
    int64_t rows, experts, hidden, k;
    int n_group, topk_group;
    bool normalize;
    float scaling;
};
void moe_route_grouped(const GroupedRouteParams& p, cudaStream_t stream);

}  // namespace tracelm::cuda::ops
