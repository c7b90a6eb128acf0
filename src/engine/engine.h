// Generation driver: eager prefill, then decode steps that are replayed from a captured graph.
//
// Decode state (next token id, position, slot, sequence length, step counter, sampled history)
// lives in persistent device buffers and is advanced by the graph itself, so consecutive replays
// need no host write. The host reads sampled ids only between replays.
//
// Batch buckets: a decode step of S sequences runs over batch_bucket(S) rows (1, 2, 4, 8, 16, 32, then
// multiples of 32); the padded rows are inert (no KV blocks, slot -1, length 0: they write nothing and
// attend to nothing). Each bucket gets its own graph, captured on its first use after one eager warm-up
// step of that bucket and kept for every later request of the same bucket.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "kv/paged_kv_cache.h"
#include "kv/prefix_cache.h"
#include "model/decoder.h"
#include "model/model.h"
#include "ops/sampling/sampling.h"

namespace tracelm {

struct EngineOptions {
    bool capture = true;     // replay decode steps from a captured graph (when the backend can)
    int block_size = 16;     // tokens per KV block
    int max_seqs = 1;        // sequences decoded together
    int64_t context = 4096;  // tokens per sequence (prompt + generated); capped by the model
    // Prompt tokens per eager prefill forward: llama.cpp's default batch, so a prompt is cut where llama.cpp cuts
    // it (attention sums in a different order for a batch of one token than for more).
    int prefill_chunk = 512;
    // KV cache values: F32 or F16. Unset: F16 for GGUF models (llama.cpp's default, whose CPU attention numbers an
    // f16 cache reproduces), F32 for safetensors checkpoints.
    std::optional<DType> kv_dtype;
    // Share the KV blocks of prompt prefixes computed before (kv/prefix_cache.h, docs/prefix-cache.md).
    bool prefix_cache = true;
};

// The KV cache dtype `options` give for `model`.
DType kv_dtype_for(const Model& model, const EngineOptions& options);

// Log-probabilities of one sampled token (ops/sampling/sampling.h, step 2).
struct TokenLogprobs {
    int32_t id = 0;
    float logprob = 0.0f;
    std::vector<std::pair<int32_t, float>> top;  // the best tokens, best first
};

class Engine {
   public:
    Engine(const Model& model, Backend& backend, EngineOptions options);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Validates the prompts, reserves KV blocks for prompt + max_new_tokens, prefills every prompt
    // and returns each sequence's first sampled token. `params` gives each sequence's sampling (empty: all
    // greedy); they stay in device buffers for every step of the request. Throws std::runtime_error on bad
    // requests.
    std::vector<int32_t> start(const std::vector<std::vector<int32_t>>& prompts, int max_new_tokens,
                               const std::vector<sampling::RowParams>& params = {});
    // One decode step for every sequence: eager ops, or a replay of the captured step (captured
    // after one eager warm-up step).
    void step();
    // Ids sampled by the last step / the last `n` steps, read from the device.
    std::vector<int32_t> sampled();
    std::vector<int32_t> history(int n);
    // Log-probabilities of the tokens sampled last, for the sequences that asked for them (empty entries for
    // the others), read from the device.
    std::vector<TokenLogprobs> logprobs();
    // Logits [S, vocab] of the last forward (after the sampling penalties), read from the device.
    std::vector<float> logits();
    // Returns the blocks of the current batch to the cache.
    void finish();

    // Rows a decode step of S sequences runs over.
    static int batch_bucket(int S);

    int64_t context() const { return context_; }
    // Whether the current batch's bucket has a captured graph.
    bool captured() const;
    int replays() const { return replays_; }
    int decode_steps() const { return steps_; }
    size_t kv_bytes() const { return kv_->bytes(); }
    DType kv_dtype() const { return kv_->dtype(); }
    // Block reuse so far, and the allocator (its state is walked by tests).
    const PrefixCacheStats& prefix_stats() const { return cache_->stats(); }
    const PrefixCache& prefix_cache() const { return *cache_; }
    // Ops recorded in the current bucket's decode graph (0 before capture).
    size_t graph_ops() const;

   private:
    struct BucketGraph {
        GraphId graph = -1;
        bool warmed = false;  // an eager step of this bucket ran, so its graph may be captured
    };

    Tensor i32(const std::string& name, int64_t n, int64_t cols = 1);
    void issue_decode_step();
    Tensor history_view(int rows) const;  // [context, rows] view of the sampled-id history
    SamplingIo sampling_rows(int64_t r0, int64_t n, int step_offset) const;
    // Leading blocks of an n-token prompt that may be shared: at least one prompt token is computed (the first
    // sampled token comes from a real forward), and the first recomputed chunk is not cut down to a single row where
    // a run without sharing has several (attention sums one row in another order, docs/ggml-numerics.md).
    int shareable_blocks(int64_t n) const;
    // llama.cpp ropes the llama architecture in "normal" mode, over interleaved q/k pairs (AttentionMeta).
    bool interleaved_pairs() const { return model_.config().arch == Arch::Llama; }

    const Model& model_;
    Backend& backend_;
    EngineOptions opt_;
    int64_t context_;
    int max_blocks_;
    std::unique_ptr<PagedKvCache> kv_;
    std::unique_ptr<PrefixCache> cache_;
    std::unique_ptr<Decoder> decoder_;
    std::vector<Buffer*> buffers_;

    // Prefill inputs.
    Tensor pf_ids_, pf_pos_, pf_slots_, pf_qsl_, pf_seq_len_;
    // Decode state, advanced on the device.
    DecodeState state_;
    Tensor block_tables_, decode_qsl_, sampled_;
    Buffer* history_buf_ = nullptr;
    // Sampling state: parameters per row (written by start()), token counts, logprob outputs.
    SamplingIo sampling_;
    std::vector<sampling::RowParams> params_;  // of the current request

    int max_rows_;  // batch_bucket(max_seqs): rows of every decode-state buffer
    int num_seqs_ = 0;
    int bucket_ = 0;  // batch_bucket(num_seqs_)
    std::vector<std::vector<int32_t>> blocks_;
    std::map<int, BucketGraph> graphs_;  // by bucket
    int steps_ = 0;
    int replays_ = 0;
};

}  // namespace tracelm
