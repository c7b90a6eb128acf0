// How much prompt prefill a scheduler step may carry. Every decoding stream waits for the step's prompt pieces before
// its next token, so a step with pieces is the tail of the inter-token latency. As Sarathi-Serve sizes a step from a
// time-between-tokens target, the pacer gives a step's pieces the time left under `stretch` times the decode step of
// the whole running set (the step it settles into once every admitted sequence decodes), from measured costs:
// - each batch bucket's decode step: a moving average of its steps; a bucket not run yet is estimated from a timed
//   replay at start-up, scaled by what real steps cost against their own start-up replays (those ran with inert
//   rows, so without attention: half of a SmolLM2 step at 150 tokens of context);
// - a prompt piece, fitted as a + b * tokens by least squares over moving averages: a is mostly one pass over the
//   weights, which every forward pays (about 25 ms of a qwen3-0.6b Q8_0 piece on 2 cores), so two small pieces cost
//   far more than one of their size. A piece computed in a decode step's forward (a mixed step) shares that pass:
//   its cost is what it adds to the step, fitted apart, since the two kinds differ in a.
// A token budget alone cannot keep steps even: a prompt token and a decode row cost differently on every model,
// numerics and batch size, and a step runs over every row of its bucket, however few of them decode. Where the budget
// cuts a prompt changes no bit of the answer (Engine::next_prefill_tokens), so the pacing is free to depend on the
// traffic.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace tracelm::serve {

// A prompt being prefilled: the tokens it has left, and the decode steps left before it should join the batch.
struct PendingPrompt {
    int64_t tokens = 0;
    int64_t steps = 0;  // 0 or less: due now
};
// Prompt tokens per step that prefill `prompts`, taken in this order (FCFS), each by its step at an even rate: the
// largest, over the prompts, of the tokens of it and of those before it per step it has left (all of them once one
// is due). Spreading a prompt over steps, instead of giving it all the time the stretch allows at once, keeps the
// steps of the decoding streams even: a piece in a decode step's forward pays almost no fixed cost, so many small
// pieces cost what one large piece costs.
int64_t even_prefill_tokens(const std::vector<PendingPrompt>& prompts);

// Prompt tokens a mixed step carries: the even spread (`even`, even_prefill_tokens) as far as the stretch allows
// (`paced`, StepPacer::tokens_for), and, whatever the stretch, at least 1.5 times the rate prompt tokens arrive at
// (StepPacer::prompt_rate; the room lets a backlog drain), up to the step's token budget. Steady traffic whose
// prompts need longer steps than the stretch gets them: holding its prompts back would only queue them, with their
// rows idle and time to first token growing without bound. So the stretch bounds what goes beyond that rate, such as
// a wave of prompts that arrive together.
int64_t mixed_prefill_tokens(int64_t paced, int64_t even, double prompt_rate, int64_t budget);

// Where a prompt piece ran: a forward of its own, or the decode step's (Engine::mixed_step).
enum class PieceForward { Own, DecodeStep };

class StepPacer {
   public:
    // `stretch`: a step with prompt pieces aims at no more than this times the running set's decode step; 0 leaves
    // the pieces unbounded in time.
    explicit StepPacer(double stretch) : stretch_(stretch) {}

    // A replay of `bucket`'s decode step with inert rows took `seconds` (Engine::replay_seconds).
    void seed_decode(int bucket, double seconds);
    // A decode step over `bucket` rows took `seconds`.
    void decode_done(int bucket, double seconds);
    // A prompt piece of `tokens` tokens took `seconds` (in a decode step: what it added to the step).
    void piece_done(int64_t tokens, double seconds, PieceForward where = PieceForward::Own);

    // Seconds of prompt pieces the next step may run, given the bucket it decodes (0: nothing decodes) and the
    // bucket of every running sequence: unbounded (infinity) when nothing decodes, since no stream waits, or while
    // the running set's decode cost is unknown.
    double piece_seconds(int decoding_bucket, int running_bucket) const;
    // The most prompt tokens one piece can compute in `seconds` at the fitted cost (0 when not even a piece's
    // fixed cost fits); `cap` when no piece was measured yet or more would fit. Pieces in a decode step are sized
    // by the pieces of their own until one was measured.
    int64_t tokens_for(double seconds, int64_t cap, PieceForward where = PieceForward::Own) const;

    // Prompt tokens to prefill were admitted (after any cached prefix); the next step_ended() counts them.
    void prompts_admitted(int64_t tokens) { admitted_ += tokens; }
    // A decode step ran: the prompt tokens admitted since the last one enter the moving average of prompt tokens
    // admitted per step, the rate that steady traffic needs prefilled to keep up.
    void step_ended();
    double prompt_rate() const { return prompt_rate_; }

    double decode_cost(int bucket) const;  // 0 when neither measured nor seeded
    // The fitted cost of a piece: fixed seconds and seconds per token (both 0 before the first piece).
    double piece_fixed(PieceForward where = PieceForward::Own) const;
    double piece_per_token(PieceForward where = PieceForward::Own) const;

   private:
    struct Cost {
        double seed = 0;     // the start-up replay
        double average = 0;  // of real steps; 0 before the first
    };
    // Moving averages of a piece's tokens n and seconds t, and of n * n and n * t.
    struct PieceFit {
        bool seen = false;
        double n = 0, t = 0, nn = 0, nt = 0;
        void add(double tokens, double seconds);
        double per_token() const;
        double fixed() const;
    };
    const PieceFit& fit(PieceForward where) const { return pieces_[where == PieceForward::DecodeStep ? 1 : 0]; }
    double stretch_;
    std::map<int, Cost> decode_;
    double seed_scale_ = 1;  // real step / start-up replay, of the last bucket to take its first real step
    PieceFit pieces_[2];     // by PieceForward
    int64_t admitted_ = 0;   // prompt tokens admitted since the last step
    double prompt_rate_ = 0;
};

}  // namespace tracelm::serve
