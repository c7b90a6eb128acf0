// Generation driver: eager prefill, then decode steps that are replayed from a captured graph.
//
// Decode state (next token id, position, slot, sequence length, step counter, sampled history)
// lives in persistent device buffers and is advanced by the graph itself, so consecutive replays
// need no host write. The host reads sampled ids only between replays.
//
// Batch buckets: a decode step of S sequences runs over batch_bucket(S) rows (1, 2, 4, 8, 16, 32, then
// multiples of 32); the padded rows are inert (no KV blocks, slot -1, length 0: they write nothing and
// attend to nothing). Each bucket gets its own graph, captured on its first use after one eager warm-up
// step of that bucket (or all of them up front: capture_buckets()) and kept for every later request of the same
// bucket.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "kv/paged_kv_cache.h"
#include "kv/prefix_cache.h"
#include "model/decoder.h"
#include "model/model.h"
#include "ops/sampling/sampling.h"

namespace tracelm {

namespace testing {
class EngineProbe;
}

struct EngineOptions {
    bool capture = true;     // replay decode steps from a captured graph (when the backend can)
    int block_size = 16;     // tokens per KV block
    int max_seqs = 1;        // sequences decoded together
    int64_t context = 4096;  // tokens per sequence (prompt + generated); capped by the model
    // Prompt tokens per eager prefill forward: llama.cpp's default batch, so a prompt is cut where llama.cpp cuts
    // it (attention sums in a different order for a batch of one token than for more).
    int prefill_chunk = 512;
    // KV cache values: F32 or F16. Unset: F16 for GGUF models (llama.cpp's default, whose CPU attention numbers an
    // f16 cache reproduces), F32 for safetensors checkpoints and DeepSeek GGUFs (its indexer keys must be F32).
    std::optional<DType> kv_dtype;
    // Share the KV blocks of prompt prefixes computed before (kv/prefix_cache.h, docs/prefix-cache.md).
    bool prefix_cache = true;
    // KV pool size in blocks; 0: enough for max_seqs sequences of the whole context.
    int64_t kv_blocks = 0;
    // The sliding-window layers' own pool, in blocks (models that have one: Gemma 3); at least max_seqs times a
    // row's reserve. 0: that, plus with prefix caching room for 4 cached windows per sequence.
    int64_t kv_sliding_blocks = 0;
    // DeepSeek-V3.2: attend to every cached position instead of the indexer's top-k selection (for comparison; the
    // two agree exactly while a context is no longer than index_topk).
    bool dense_attention = false;
};

// The KV cache dtype `options` give for `model`.
DType kv_dtype_for(const Model& model, const EngineOptions& options);

// Positions [begin, end) of a prompt that decode steps generated: an earlier reply of a conversation (tracelm chat).
// They are computed one forward of one row per token, as decode computed them, so that a conversation's KV is the
// same whether it is computed anew or shared from the blocks its turns left in the prefix cache
// (docs/prefix-cache.md).
struct TokenSpan {
    int64_t begin = 0, end = 0;
};

// Engine::mixed_step could not write the prompt piece's inputs: nothing ran, the decoding rows are as they were.
struct PieceInputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class Engine {
   public:
    Engine(const Model& model, Backend& backend, EngineOptions options);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Validates the prompts, reserves KV blocks for prompt + max_new_tokens, prefills every prompt
    // and returns each sequence's first sampled token. `params` gives each sequence's sampling (empty: all
    // greedy); they stay in device buffers for every step of the request. `decoded` gives each prompt's spans
    // that decode generated (empty: none; admit()). Throws std::runtime_error on bad requests.
    std::vector<int32_t> start(const std::vector<std::vector<int32_t>>& prompts, int max_new_tokens,
                               const std::vector<sampling::RowParams>& params = {},
                               const std::vector<std::vector<TokenSpan>>& decoded = {});
    // One decode step for every sequence: eager ops, or a replay of the captured step (captured
    // after one eager warm-up step).
    void step();
    // Ids sampled by the last step / the last `n` steps, read from the device. sampled() also records each
    // decoding row's ids, so that the KV blocks its steps fill can be published when it is released.
    std::vector<int32_t> sampled();
    std::vector<int32_t> history(int n);
    // Log-probabilities of the tokens sampled last, for the sequences that asked for them (empty entries for
    // the others), read from the device.
    std::vector<sampling::TokenLogprobs> logprobs();
    // Logits of the last forward (after the sampling penalties), read from the device: [S, vocab] after a step,
    // [1, vocab] after a prefill that computed its prompt's last token (only that row is written).
    std::vector<float> logits();
    // Right after a prefill() that completed a row admitted without generated tokens (before any other forward):
    // the final hidden state of its prompt's last token after the model's final norm, what the LM head read for
    // its first token, read from the device. Last-token pooling's embedding, before normalisation.
    std::vector<float> prompt_hidden();
    // Returns the blocks of every sequence to the cache.
    void finish();

    // ---- Rows (engine_rows.cpp): continuous batching (serve/scheduler.h), sequences join and leave the decode
    // batch between steps ----
    // start() above is these calls for a fixed batch. A sequence is admitted into a free row, prefilled one forward
    // at a time, then joins the decode batch: its row's state is written before the next step. A step runs over
    // batch_bucket(last decoding row + 1) rows; rows without a decoding sequence are inert (their block table is
    // empty, so they write and attend to nothing).

    // Throws std::runtime_error naming the problem when `prompt` followed by `new_tokens` generated tokens cannot
    // run: empty, an id outside the vocabulary, or longer than the context.
    void check_prompt(const std::vector<int32_t>& prompt, int64_t new_tokens) const;
    // Admits `prompt` followed by `generated`, tokens the sequence already produced (after a preemption; they are
    // recomputed one forward each, as decode computed them, so the sequence goes on exactly as it would have),
    // into the lowest free row with KV blocks for max(reserve, all tokens + 1) tokens. `decoded`: the prompt's
    // spans that decode generated (ascending, disjoint, non-empty, before the prompt's last token; else
    // std::invalid_argument), computed one row per forward too. Returns the row, or -1 when no row or too few KV
    // blocks are free (nothing is held then). The caller has checked the prompt. When it throws (a device error),
    // nothing is held either.
    // prompt_logprobs n in [0, kMaxLogprobs] (-1: none) scores the prompt: every position is computed (no block is
    // shared from the prefix cache) and take_prompt_logprobs() gives each prompt token's log-probability after the
    // first, with the n best, as sample() reports a token's (ops/sampling/sampling.h; no penalties, no logit
    // adjustment). What the row samples and decodes is unchanged.
    int admit(const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated,
              const sampling::RowParams& params, int64_t reserve, const std::vector<TokenSpan>& decoded = {},
              int prompt_logprobs = -1);
    // Once a row admitted with prompt_logprobs has computed its prompt: the scores of prompt tokens 1..n-1, in
    // order (each TokenLogprobs' id is that token); empty before, and after a first call.
    std::vector<sampling::TokenLogprobs> take_prompt_logprobs(int row);
    // For benchmarks of long contexts without their prefill: admits a sequence whose first `positions` positions
    // hold seeded random values in every pool of every layer (uniform in [-1, 1]) instead of a prompt's, with KV
    // blocks for max(reserve, positions + 1) tokens, and joins it to the decode batch with `input` (checked as a
    // prompt token) as its next token, decoded greedily. A step's attention and indexer do the same work whatever
    // the values. Needs prefix caching off and no sliding-window pool (else std::logic_error); the row publishes
    // nothing (its tokens are unknown). Returns the row, or -1 as admit() does.
    int admit_synthetic(int64_t positions, int32_t input, int64_t reserve, uint64_t seed);
    // Runs the next prefill forward of an admitted row (a chunk of the prompt, or one generated token), of
    // next_prefill_tokens(row, budget) tokens, which must be at least 1. Returns true once the row has joined the
    // decode batch; a sequence admitted without generated tokens has then sampled its first token, returned in *first.
    bool prefill(int row, int32_t* first, int64_t budget = kWholeChunk);
    // Gives every decoding row the KV block its next step writes into; returns the rows that could not get one.
    std::vector<int> grow();
    // Returns a row's blocks to the cache and makes the row inert. With prefix caching, its full blocks whose
    // tokens are known (the prompt, the tokens it was admitted with, and those sampled() read) are published first.
    // Changes host state only, so it cannot fail halfway through; the device row is written inert before the next
    // decode step (a device error there fails that step, and the write is retried before the one after).
    void release(int row);
    // The logits adjustment of an admitted row (ops/sampling/sampling.h: adjust_logits), applied to its first
    // sampled token and every decode step until release(): written into device buffers now, never inside a replay.
    // set_logit_bias: OpenAI's logit_bias, at most kMaxLogitBias entries of ids in the vocabulary and finite biases
    // (else std::invalid_argument). set_token_mask: mask_words(vocab) words, bit i of word w allowing token 32w + i;
    // null turns the row's mask off. Write only when the mask changed: it is a row of ceil(vocab / 32) words.
    void set_logit_bias(int row, const std::vector<std::pair<int32_t, float>>& bias);
    void set_token_mask(int row, const uint32_t* words);
    // Tokens the next prefill(row, budget) forward computes: the rest of the prompt's prefilled run (up to a decoded
    // span) up to the next multiple of prefill_chunk (llama.cpp's cut), or 1 for a token decode computed. A smaller
    // budget cuts that forward into pieces of at least two rows on both sides of the cut, so every position is still
    // computed in a forward of several rows, which gives the same bits (attention's dot orders depend on one row vs
    // several, not on the rows' number, and each piece's matmuls sum in the order of the whole forward's rows:
    // docs/ggml-numerics.md, tests/engine/test_prefill_chunks.cpp). Except in a model whose experts sum by the rows
    // of the whole forward (K-type experts in the ggml numerics, ops/moe/moe.h), whose forwards are never cut. 0 when
    // the budget fits no such piece; a budget of min_prefill_budget(row) always fits one.
    static constexpr int64_t kWholeChunk = INT64_MAX;
    int64_t next_prefill_tokens(int row, int64_t budget = kWholeChunk) const;
    // Tokens admitted row `row` still computes before it joins the decode batch (its prompt's and recomputed ones).
    int64_t prefill_left(int row) const;
    // The least budget with which next_prefill_tokens(row, budget) is not 0: 3, or the rest of a forward that is never
    // cut.
    int64_t min_prefill_budget(int row) const;
    // Rows a decode step of S sequences runs over.
    static int batch_bucket(int S);

    // ---- Mixed steps (engine_mixed.cpp): a prompt piece in the decode step's forward ----
    // Whether mixed_step() can run on this model: every op of the forward gives each row the same bits whatever
    // rows share it (not so for weights whose llama.cpp order depends on the forward's rows: K types in the ggml
    // numerics, or whole_forwards_).
    bool can_mix() const;
    // Whether admitted row `row`'s next forward is a prompt piece mixed_step() takes (not a generated token's
    // recompute; not a row that scores its prompt).
    bool mixable(int row) const;
    // The next decode step of every decoding row and the next prefill piece of admitted row `row` (a prompt piece of
    // next_prefill_tokens(row, budget) tokens, not a generated token's recompute, for a row that scores no prompt)
    // in one forward, so that the piece shares the step's pass over the weights instead of paying its own. Each
    // decoding row advances exactly as step() advances it and the piece computes what prefill(row, first, budget)
    // computes, bit for bit; then, as after prefill(), the row may have joined the decode batch (returned), with its
    // first token in *first, for the next step. Eager (not a replay). std::logic_error when !can_mix(), nothing
    // decodes, or the row's next forward is not such a piece; PieceInputError when writing the piece's inputs failed
    // (nothing ran: the row may be released and the others step on); any other error may have left the decoding
    // rows half-stepped.
    bool mixed_step(int row, int32_t* first, int64_t budget = kWholeChunk);
    // Steps mixed_step() ran.
    int mixed_steps() const { return mixed_steps_; }
    // Rows the next decode step runs over (0 when nothing decodes).
    int bucket() const { return bucket_; }
    // The rows that decode, ascending: the rows a mixed step's forward runs over (the bucket's others are inert).
    std::vector<int> decoding_rows() const;
    // Rows the decode step will run over once every admitted row decodes (0 when none is admitted).
    int bucket_once_joined() const;

    // ---- Graphs (engine_graphs.cpp): one captured decode graph per batch bucket ----
    // Every bucket up to batch_bucket(max_seqs), ascending.
    std::vector<int> buckets() const;
    // Runs the eager warm-up step and the capture of every bucket's decode graph up to batch_bucket(max_seqs), with
    // every row inert, so that no later step warms up or captures: a server calls it before it takes requests (a
    // capture costs several steps' time), then times two replays of each bucket (replay_seconds). Only while no
    // sequence is admitted (else std::logic_error); the rows and the step counter are left as the constructor leaves
    // them, so what any sequence computes later is unchanged. Does nothing without capture.
    void capture_buckets();
    // Seconds a replay of `bucket`'s graph took in capture_buckets(), which times every bucket (with every row inert,
    // so without attention, which real steps add); 0 before.
    double replay_seconds(int bucket) const;
    // Whether the bucket of the last decode step has a captured graph.
    bool captured() const;
    // Ops recorded in the last decode step's bucket graph (0 before capture).
    size_t graph_ops() const;
    // Writes zeros over the whole KV pool; only while no block is in use or cached (else std::logic_error). A server
    // calls it before it takes requests: the CPU backend reserves the pool but the system maps its pages on first
    // write, and a decode step that first wrote into a fresh stretch of a qwen3-0.6b pool stalled 0.4-0.9 s on the
    // benchmark VM (the first prefill too).
    void touch_kv();

    // ---- Sizes and counters (a server's metrics, a CLI's summary) ----
    int64_t context() const { return context_; }
    size_t kv_bytes() const { return kv_->bytes(); }
    // kv_bytes() of an engine of these options, known before the model's weights are bound (Model::open).
    static size_t kv_bytes_for(const Model& model, const EngineOptions& options);
    DType kv_dtype() const { return kv_->dtype(); }
    int kv_blocks_total() const { return cache_->num_blocks(); }
    int kv_blocks_used() const { return cache_->num_blocks() - cache_->free_count() - cache_->lru_count(); }
    // The sliding-window layers' own pool (0 when the model has none): each admitted sequence holds a fixed number
    // of its blocks, enough for its window and one prefill forward, whatever the sequence's length.
    int kv_sliding_blocks_total() const { return sliding_cache_ ? sliding_cache_->num_blocks() : 0; }
    int kv_sliding_blocks_used() const {
        if (!sliding_cache_) return 0;
        return sliding_cache_->num_blocks() - sliding_cache_->free_count() - sliding_cache_->lru_count();
    }
    // Block reuse so far.
    const PrefixCacheStats& prefix_stats() const { return cache_->stats(); }
    int replays() const { return replays_; }
    int decode_steps() const { return steps_; }
    // Decode rows the host rewrote between steps (joins, leaves, new KV blocks), and steps that had none.
    uint64_t row_writes() const { return row_writes_; }
    uint64_t steady_steps() const { return steady_steps_; }

   private:
    friend class testing::EngineProbe;  // what tests inspect beyond this interface (tests/support/engine_probe.h)

    struct Row {
        bool admitted = false;
        bool decoding = false;  // joined the decode batch
        int64_t n = 0, k = 0;  // prompt and generated tokens it was admitted with
        // Ids of positions [0, tokens.size()): the prompt, the generated tokens, then each decode input.
        std::vector<int32_t> tokens;
        // Per position of `tokens`: 1 where it is computed in a forward of one row, 0 in a forward of several (2 where
        // those are fewer than kGgmlTiledMinRows) (the PrefixCache's kind; a block is shared only with a sequence
        // that computes its positions the same way).
        std::vector<uint8_t> one_row;
        sampling::RowParams params;
        std::vector<int32_t> blocks;
        // Sliding pool: the block of each logical block of the window (-1 outside it), and the row's other reserved
        // blocks, which the window takes as it moves.
        std::vector<int32_t> sliding, sliding_spare;
        int64_t computed = 0;  // tokens whose KV is written
        int64_t pos = 0;       // decoding: position of the next input token
        int score_n = -1;      // admit's prompt_logprobs
        std::vector<sampling::TokenLogprobs> scores;  // of prompt tokens 1..n-1, filled as the prompt is computed
    };
    // Scores prompt tokens c0 + 1 .. min(c1, n - 1) of a scoring row from the last forward's all_hidden rows, a
    // group of kScoreRows at a time: the LM head, then sample() forced to each target token.
    void score_prompt(Row& r, int64_t c0, int64_t c1);
    static constexpr int64_t kScoreRows = 8;
    struct Scoring {  // made by the first admit that scores a prompt
        Tensor logits, ids;
        SamplingIo io;
    };
    std::optional<Scoring> scoring_;
    void make_scoring();
    struct BucketGraph {
        GraphId graph = -1;
        bool warmed = false;  // an eager step of this bucket ran, so its graph may be captured
        double replay_seconds = 0;  // timed in capture_buckets()
    };
    void capture(BucketGraph& g);  // records issue_decode_step() of bucket_ into g

    Tensor i32(const std::string& name, int64_t n, int64_t cols = 1);
    // Entries [first, first + n) of a row's block table.
    Tensor table_entries(int row, int64_t first, int64_t n) const;
    int32_t slot_of(const Row& r, int64_t pos) const;
    // `logits`: whether anything samples from this forward (the prompt's last forward of a sequence without
    // generated tokens); the others skip the LM head.
    void prefill_forward(int row, int64_t c0, int64_t c1, const int32_t* ids, bool logits);
    // Writes the row's decode state (input id, position, slot, length, block table): it joins the next step.
    void join(int row, int32_t input, int64_t pos);
    // After the forward that completed a row's prefill: its sampling state, then its first token sampled from
    // `logits` (the row's [1, vocab] of that forward; not for a row admitted with generated tokens, whose last one
    // is its next input), and the join. Returns true.
    bool complete_prefill(int row, int32_t* first, const Tensor& logits);
    // The step's bookkeeping once the decode rows' forward and sampling are enqueued (step(), mixed_step()).
    void end_step();
    // Before a decode step: each decoding row's sliding-window blocks for its next position (host writes where its
    // window enters a new block).
    void move_windows();
    void write_row_state(int row, int32_t input, int64_t pos, int32_t slot, int32_t len);
    // Writes the device state of the rows released since the last step inert (release()).
    void write_released_rows();
    void update_bucket();
    void make_rows_inert();
    bool uses_graphs() const;
    void issue_decode_step();
    // The decode state of the bucket's S rows; their sampling from `logits` [S, vocab] and the state's advance.
    DecodeState step_state(int S) const;
    void sample_and_advance(const Tensor& logits, const DecodeState& st);
    Tensor history_view(int rows) const;  // [context, rows] view of the sampled-id history
    SamplingIo sampling_rows(int64_t r0, int64_t n, int step_offset) const;
    LogitAdjustIo adjust_rows(int64_t r0, int64_t n) const;
    void write_adjust_flags(int row, std::array<int32_t, 2> flags);
    // End of the forward that computes position c0 < n of a row whose positions are computed as `one_row` says.
    int64_t forward_end(const std::vector<uint8_t>& one_row, int64_t n, int64_t c0) const;
    // Tokens left in the row's next forward (1 for a generated token's recompute).
    int64_t forward_rest(int row) const;
    // Rows of the whole forward (as one_row plans it, whatever piece of it runs) that computes position c < n.
    int64_t forward_rows(const std::vector<uint8_t>& one_row, int64_t n, int64_t c) const;
    // Leading blocks of an n-token prompt that may be shared, at most `at_most` (those cached: their tokens and how
    // they were computed match): at least one prompt token is computed (the first sampled token comes from a real
    // forward), and the first recomputed forward is not cut down to a single row where a run without sharing has
    // several (attention sums one row in another order, docs/ggml-numerics.md). With whole_forwards_, the shared
    // blocks also end where a forward ended both here and in the sequence that computed them.
    int shareable_blocks(const std::vector<uint8_t>& one_row, int64_t n, int at_most) const;
    // Publishes the row's full blocks among its first `written` positions, and their sliding-pool twins it maps.
    void publish(const Row& r, int64_t written);
    // llama.cpp ropes the llama architecture in "normal" mode, over interleaved q/k pairs (AttentionMeta).
    bool interleaved_pairs() const { return model_.config().arch == Arch::Llama; }
    // Whether the sliding-window layers have their own pool. Its blocks are published under their twins, the global
    // pool's blocks of the same positions (kv/prefix_cache.h): a prefix is shared when its global blocks and the
    // sliding blocks of the window before its end are cached (docs/prefix-cache.md).
    bool slides() const { return sliding_cache_ != nullptr; }
    bool sharing() const { return opt_.prefix_cache; }
    // Some MoE layer's experts sum their products in the order of their rows in the whole forward (K types in the
    // ggml numerics, ops/moe/moe.h): a prompt forward's bits depend on all its tokens, so forwards are never cut
    // and shared prefixes end where forwards ended.
    bool whole_forwards_ = false;
    // The first logical block of the window of a query at position pos.
    int64_t window_start_block(int64_t pos) const { return std::max<int64_t>(0, pos - window_ + 1) / opt_.block_size; }
    // Whether the sliding-pool twins of the window before position k * block_size are cached, for a prompt whose
    // leading cached global blocks are `chain` (at least k).
    bool window_cached(const std::vector<int32_t>& chain, int k) const;
    // Maps the sliding-pool blocks a forward of positions [c0, c1) reads and writes (from the window of c0's query
    // on); those before it leave the window (leave_window). Returns whether the row's table changed.
    bool map_sliding(Row& r, int64_t c0, int64_t c1);
    // Logical block j is out of every later query's window: it is published under its twin for later prompts (when
    // its tokens are known) and given back, and a free or evicted block takes its place among the row's spare ones.
    void leave_window(Row& r, int64_t j);
    // Gives back every sliding-pool block the row holds.
    void release_sliding(Row& r);
    int32_t sliding_slot_of(const Row& r, int64_t pos) const;

    const Model& model_;
    Backend& backend_;
    EngineOptions opt_;
    int64_t context_;
    int max_blocks_;
    std::unique_ptr<PagedKvCache> kv_;
    std::unique_ptr<PrefixCache> cache_;
    std::unique_ptr<PrefixCache> sliding_cache_;  // the sliding pool's allocator (blocks published under twins)
    int window_ = 0;
    int sliding_reserve_ = 0;  // sliding-pool blocks each admitted row holds
    std::unique_ptr<Decoder> decoder_;
    std::vector<Buffer*> buffers_;

    // Prefill inputs (the prefilled sequence's own block table: decode rows stay inert until they join).
    Tensor pf_ids_, pf_pos_, pf_slots_, pf_qsl_, pf_seq_len_, pf_table_, pf_sliding_slots_, pf_sliding_table_;
    // Mixed-step inputs: a step's decode rows (copied on the device from the decode state) followed by a prompt
    // piece's rows, as one forward of bucket + 1 sequences.
    Tensor mx_ids_, mx_pos_, mx_slots_, mx_qsl_, mx_seq_lens_, mx_tables_, mx_sliding_slots_, mx_sliding_tables_;
    bool tiled_weights_ = false;  // some weight's llama.cpp order depends on the forward's rows (K types, ggml)
    // Decode state, advanced on the device.
    DecodeState state_;
    Tensor block_tables_, decode_qsl_, sampled_;
    Tensor sliding_tables_, sliding_slots_;  // the sliding pool's block tables; slots computed on the device
    Buffer* history_buf_ = nullptr;
    // Sampling state: parameters per row (written by start()), token counts, logprob outputs.
    SamplingIo sampling_;
    // Logits adjustment per row (logit_bias, token mask), and the flags last written to the device.
    LogitAdjustIo adjust_;
    std::vector<std::array<int32_t, 2>> adjust_flags_;

    int max_rows_;  // batch_bucket(max_seqs): rows of every decode-state buffer
    std::vector<Row> rows_;  // max_seqs of them
    std::vector<uint8_t> inert_pending_;  // per row: released while decoding, its device state not yet inert
    int num_seqs_ = 0;  // last decoding row + 1
    int logits_rows_ = 0;  // rows of logits the last forward wrote
    int bucket_ = 0;    // batch_bucket(num_seqs_), 0 when nothing decodes
    int last_bucket_ = 0;  // of the last decode step
    int32_t global_step_ = 0;  // the device's step counter
    std::map<int, BucketGraph> graphs_;  // by bucket
    int steps_ = 0;
    int replays_ = 0;
    int mixed_steps_ = 0;
    uint64_t row_writes_ = 0, steady_steps_ = 0;
    bool rows_written_ = false;  // since the last step
};

}  // namespace tracelm
