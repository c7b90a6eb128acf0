// Causal attention over a paged KV cache: an f32 cache in tracelm's own numbers, one (query token, head) pair per
// work item; an f16 cache in llama.cpp's.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/thread_pool.h"

namespace tracelm::cpu {

struct PagedAttentionArgs {
    const float* q;                // [T, heads*head_dim]
    const void* k_cache;           // [slots, kv_heads*head_dim], f32 or f16 as the range function expects
    const void* v_cache;
    const int32_t* block_tables;   // [num_seqs, max_blocks]
    const int32_t* seq_lens;       // [num_seqs]
    const int32_t* query_start;    // [num_seqs + 1]
    float* out;                    // [T, heads*head_dim]
    int64_t num_slots;
    int num_seqs, max_blocks, block_size;
    int heads, kv_heads, head_dim;
    float scale;
    int window = 0;  // sliding window (AttentionMeta::window), 0: none
};

// The cached positions query row t may see: [start, visible) (causal, within its block table row, and within the
// sliding window when there is one; none when the row belongs to no sequence), and its sequence's first query row
// and number of query rows in this call.
struct QueryRow {
    int64_t start = 0;
    int64_t visible = 0;
    int64_t first = 0;
    int64_t q_len = 0;
    const int32_t* table = nullptr;  // the sequence's block table row
};
QueryRow query_row(const PagedAttentionArgs& a, int64_t t);
// The cache slot of position pos of a row; -1 when its block is unassigned or outside the pool.
int64_t slot_of(const PagedAttentionArgs& a, const QueryRow& row, int64_t pos);

// f32 caches. Items are t * heads + h for t in [0, T).
void paged_attention_range(const PagedAttentionArgs& a, int64_t begin, int64_t end);

// One f32-cache work item (query row t = item / heads, head h = item % heads): an online softmax in f32 over the
// cached positions handed to attend(), in the order given. Dense paged attention hands it every position the row
// may see; sparse attention (ops/dsa.cpp) a selection of them.
class PagedAttentionItem {
   public:
    PagedAttentionItem(const PagedAttentionArgs& a, int64_t item);
    int64_t start() const { return row_.start; }
    int64_t visible() const { return row_.visible; }
    // Attends to position pos in [start(), visible()); a position whose block is unassigned or outside the pool is
    // skipped.
    void attend(int64_t pos);
    // Starts loading the cache rows attend(pos) will read (nothing if pos is out of range or masked).
    void prefetch(int64_t pos) const;
    // Writes the normalised output: zeros when nothing was attended.
    void finish();

   private:
    const PagedAttentionArgs& a_;
    const float* q_ = nullptr;
    float* out_ = nullptr;
    QueryRow row_;
    int64_t kv_off_ = 0;
    float m_;  // running max of the scores
    float l_ = 0.0f;  // running denominator
    float acc_[kMaxHeadDim];
};

// f16 caches, computed per (query row, head) as llama.cpp's CPU backend does without flash attention
// (docs/ggml-numerics.md): q rounded to f16; scores = f16 dots with the K rows; a two-pass softmax of
// score * scale over all visible positions (ggml's SOFT_MAX); the probabilities rounded to f16 and dotted with
// the V column of every output element, summed over positions. Both dots sum in the order ggml's MUL_MAT uses for
// the row's sequence: tinyBLAS when it has >= 2 query rows in this call, ggml_vec_dot_f16 when it has one.
struct F16AttentionArgs {
    PagedAttentionArgs a;
    const F16AttentionKernels* kernels;
    float* workspace;          // a slice of f16_attention_workspace_floats per pool thread
    int64_t workspace_floats;
    bool interleaved;          // q/k heads as tracelm keeps llama-architecture GGUF heads (see F16AttentionKernels)
    // Rows of sequences with >= 2 query rows (tinyBLAS's orders, head_dim a multiple of 8) in tiles of up to
    // kF16AttentionTile queries: the query heads of one kv head times consecutive rows, so that each cached row
    // loaded serves all of them, with every output's bits unchanged. Tests turn it off to compare.
    bool tiled;
};
// Floats of one thread's workspace for rows that see up to max_keys positions: the scores and the P.V accumulators.
int64_t f16_attention_workspace_floats(int64_t max_keys, int head_dim);
// Items are t * heads + h for query row t in [0, T) and head h, as for f32 caches; where t's sequence goes through
// tiles, the item of a tile's first row and first head computes the tile, the others nothing. A range computes the
// query heads of one kv head in it together. A fixed item space, whatever the rows' lengths, so that threads may
// claim ranges of it in a captured step; the worker's index picks its workspace slice.
void paged_attention_f16_range(const F16AttentionArgs& a, int64_t begin, int64_t end, OpWorker worker);

}  // namespace tracelm::cpu
