// Continuous batching: one thread owns the engine and runs scheduler steps; HTTP threads submit requests and read
// their tokens from a Stream.
//
// A scheduler step: admit waiting requests (FCFS) while a decode row and KV blocks are free; prefill prompt pieces
// within the step's token budget (max_batched_tokens, one of them per decoding sequence) and time budget (StepPacer:
// the decoding streams wait for the pieces); where the budgets cut a prompt changes no bit of its result
// (Engine::next_prefill_tokens); then one decode step of every running sequence (a replay of the captured graph of
// its batch bucket).
// Between steps the host writes only the rows whose sequence joined, left or needs its next KV block, and the token
// masks of constrained sequences whose allowed set changed; in steady state a step is a replay with no host write. KV
// blocks are allocated as sequences grow; when the pool runs out the newest running sequence is preempted (its blocks
// freed, requeued, later recomputed exactly) so that every request completes with the tokens it would have produced
// alone.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "ops/sampling/sampling.h"
#include "runtime/backend.h"
#include "serve/histogram.h"

namespace tracelm::serve {

struct SchedulerOptions {
    int max_seqs = 16;              // sequences decoded together
    int max_batched_tokens = 512;   // tokens per scheduler step: one per decoding sequence, the rest prompt pieces
    // A step that carries prompt pieces takes at most this times the running set's decode step (StepPacer), beyond
    // what keeps up with the rate prompts arrive at (mixed_prefill_tokens); 0: only max_batched_tokens bounds the
    // pieces. 2.5 keeps the inter-token latency p99 of streams beside a wave of prompts near 2.5 times its median
    // (docs/performance.md, "The step stretch").
    double max_step_stretch = 2.5;
    // A prompt whose pieces go into decode steps (mixed_steps) is spread evenly over this many steps from its
    // admission (even_prefill_tokens), no faster than the stretch allows but no slower than 1.5 times the rate prompt
    // tokens arrive at (mixed_prefill_tokens), so that the steps of the decoding streams stay even; 0: each step
    // takes all the stretch allows.
    int prefill_steps = 32;
    int64_t context = 4096;         // tokens per sequence (prompt + generated); capped by the model
    int64_t kv_blocks = 0;          // KV pool size in blocks; 0: max_seqs full contexts
    int64_t kv_sliding_blocks = 0;  // the sliding-window layers' pool (EngineOptions::kv_sliding_blocks)
    std::optional<DType> kv_dtype;  // unset: the model's default (EngineOptions::kv_dtype)
    int block_size = 16;
    bool prefix_cache = true;
    bool capture = true;
    // Requests queued and not yet admitted, at most: beyond it submit throws QueueFull, so a burst cannot grow the
    // queue (and the memory of its prompts) without bound.
    int max_waiting = 256;
    // A prompt piece goes into the decode step's forward where the model allows it (Engine::mixed_step), instead
    // of a forward of its own.
    bool mixed_steps = true;
};

// The engine a scheduler of these options runs (what the CLI checks against the device's memory before loading).
EngineOptions engine_options(const SchedulerOptions& options);

// A request that can never be served as given (e.g. prompt + 1 > context); what() names the lengths (HTTP 400).
struct RequestError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

// A request that cannot be queued now: SchedulerOptions::max_waiting requests wait already (HTTP 503, retry later).
struct QueueFull : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// One generation request, already tokenized and validated (sampling::row_params).
struct GenerationRequest {
    std::vector<int32_t> prompt;
    int max_new_tokens = 16;        // generation also ends when the context is full (finish Length)
    sampling::RowParams params;
    std::vector<int32_t> stop_ids;  // ids that end generation with finish Stop (not delivered); empty: ignore EOS
    // OpenAI's logit_bias: (id < vocabulary, bias) pairs, at most sampling::kMaxLogitBias (else RequestError).
    std::vector<std::pair<int32_t, float>> logit_bias;
    // Constrained decoding: before each step the sequence's row allows only the tokens its matcher allows; a token
    // it takes advances the matcher. Null: unconstrained (the row costs nothing).
    std::shared_ptr<const grammar::Compiled> constraint;
    // An embedding: the prompt is computed like any other (queued, admitted, prefilled in pieces, preempted), then
    // the request ends with Finish::Stop and the final-norm hidden state of its last token (Engine::prompt_hidden)
    // instead of tokens (Stream::embedding).
    bool embed = false;
    // n in [0, kMaxLogprobs] (-1: none): the log-probability of each prompt token after the first, with the n best
    // (Engine::admit's prompt_logprobs: the prompt is then computed whole, sharing no cached block), delivered once
    // in StreamUpdate::prompt_logprobs. The generated tokens are the same either way.
    int prompt_logprobs = -1;
};

enum class Finish { None, Stop, Length, Cancelled, Error };

struct StreamUpdate {
    std::vector<int32_t> tokens;          // tokens produced since the last update, in order
    // One per token when the request asked for logprobs (params.logprobs >= 0).
    std::vector<sampling::TokenLogprobs> logprobs;
    Finish finish = Finish::None;         // set on the last update of the request
    std::string error;                    // with Finish::Error: what failed
    // With prompt_logprobs: the prompt's, once, on the update with the first token (or the end, when none came).
    std::vector<sampling::TokenLogprobs> prompt_logprobs;
    // With the finish: seconds from submit to the first admission (to the end, when it was never admitted).
    double queue_seconds = 0;
};

// The consumer's end of one request. Thread-safe.
class Stream {
   public:
    virtual ~Stream() = default;
    // Waits up to `timeout` for tokens or the end and returns what arrived (nothing on timeout: the caller may send
    // an SSE comment line, which also tells it whether the client is still there).
    virtual StreamUpdate next(std::chrono::milliseconds timeout) = 0;
    // Ends the request (client gone, stop string seen): the scheduler frees its sequence within one step.
    virtual void cancel() = 0;
    // Calls `fn` whenever an update is ready for next(), and at once if one already is: from the producer's thread,
    // so `fn` must not block (the HTTP server posts to the connection). An empty `fn` ends the calls: once
    // on_update({}) returns, none is in progress. The default never calls (the consumer polls next()).
    virtual void on_update(std::function<void()> fn) { (void)fn; }
    // An embed request's hidden state, once next() has reported its Finish::Stop (empty before, and for others).
    virtual std::vector<float> embedding() { return {}; }
};

struct SchedulerStats {
    int running = 0;  // sequences decoding or prefilling
    int waiting = 0;  // queued, including preempted ones
    int64_t kv_blocks_used = 0, kv_blocks_total = 0;
    int64_t kv_sliding_blocks_used = 0, kv_sliding_blocks_total = 0;  // the sliding-window layers' own pool
    uint64_t prompt_tokens = 0, generated_tokens = 0;
    uint64_t requests_finished = 0, preemptions = 0;
    uint64_t decode_steps = 0, replays = 0;
    uint64_t mixed_steps = 0;           // decode steps that also computed a prompt piece (Engine::mixed_step; eager)
    uint64_t host_row_writes = 0;       // decode rows the host rewrote between steps (joins, leaves, new blocks)
    uint64_t steady_steps = 0;          // decode steps with no host write before them
    uint64_t prefix_hit_tokens = 0;     // prompt tokens whose KV came from the prefix cache
    uint64_t prefix_query_tokens = 0;   // prompt tokens looked up in the prefix cache (whole blocks)
    int block_size = 16;                // tokens per KV block
    Histogram ttft_seconds{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
    Histogram itl_seconds{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
    // Per admitted request, at its end: submit to first admission, and submit to end.
    Histogram queue_seconds{{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
    Histogram e2e_seconds{{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 60, 120, 300, 600}};
};

class Scheduler {
   public:
    // Builds the engine, writes over its KV pool once (Engine::touch_kv: no step waits for fresh memory to be mapped),
    // captures the decode graph of every batch bucket (Engine::capture_buckets) and starts the scheduler thread.
    Scheduler(const Model& model, Backend& backend, SchedulerOptions options);
    ~Scheduler();  // cancels everything and joins the thread
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Queues a request. Throws RequestError when it can never run (empty prompt, invalid id, prompt + 1 > context).
    std::shared_ptr<Stream> submit(GenerationRequest request);
    // Queues requests together (a completion's choices, its list of prompts), all or none: the first invalid one
    // throws RequestError and none is queued; QueueFull when they would take the queue past max_waiting. With prefix caching, a request whose prompt an earlier one of the
    // group also has waits until that one's prompt is computed, then shares its KV blocks (it computes only the
    // prompt's last, partial block), instead of computing the same prompt beside it.
    std::vector<std::shared_ptr<Stream>> submit(std::vector<GenerationRequest> requests);
    // Ends every queued and running request with Finish::Error and `why`, and every request submitted from then on
    // (a server that is shutting down once its drain time is over); takes effect between two steps.
    void abort_all(std::string why);
    SchedulerStats stats() const;
    int64_t context() const;
    DType kv_dtype() const;

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tracelm::serve
