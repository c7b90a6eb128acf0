#include "serve/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <cmath>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "serve/step_pacer.h"

namespace tracelm::serve {

namespace {

using Clock = std::chrono::steady_clock;

// Wakes the scheduler thread; shared with the streams, which may outlive the scheduler.
struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool pending = false;

    void notify() {
        {
            std::lock_guard<std::mutex> lock(mu);
            pending = true;
        }
        cv.notify_one();
    }
};

// One request: the consumer reads updates through Stream, the scheduler thread owns the rest.
class Sequence final : public Stream {
   public:
    Sequence(GenerationRequest r, uint64_t order, std::shared_ptr<Signal> signal)
        : req(std::move(r)), arrival(order), submitted(Clock::now()), signal_(std::move(signal)) {
        if (req.constraint) matcher.emplace(req.constraint);
    }

    StreamUpdate next(std::chrono::milliseconds timeout) override {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, timeout, [&] { return !out_.tokens.empty() || out_.finish != Finish::None; });
        StreamUpdate u = out_;
        out_.tokens.clear();  // the end (finish, error) stays: later calls report it again
        out_.logprobs.clear();
        out_.prompt_logprobs.clear();
        return u;
    }

    void cancel() override {
        cancelled.store(true);
        signal_->notify();
    }

    void on_update(std::function<void()> fn) override {
        bool ready = false;
        {
            std::lock_guard<std::mutex> lock(mu_);
            ready = !out_.tokens.empty() || out_.finish != Finish::None;
        }
        std::lock_guard<std::mutex> lock(notify_mu_);
        notify_ = std::move(fn);
        if (notify_ && ready) notify_();
    }

    std::vector<float> embedding() override {
        std::lock_guard<std::mutex> lock(mu_);
        return embedding_;
    }

    // Scheduler side.
    void set_prompt_logprobs(std::vector<sampling::TokenLogprobs> lps) {
        std::lock_guard<std::mutex> lock(mu_);
        out_.prompt_logprobs = std::move(lps);
    }
    void push(int32_t id, const sampling::TokenLogprobs* lp) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            out_.tokens.push_back(id);
            if (lp != nullptr) out_.logprobs.push_back(*lp);
        }
        cv_.notify_all();
        notify_consumer();
    }
    void end(Finish f, std::string error = {}, std::vector<float> hidden = {}) {
        prompt_ready = true;
        const std::chrono::duration<double> queued = admitted.value_or(Clock::now()) - submitted;
        {
            std::lock_guard<std::mutex> lock(mu_);
            out_.finish = f;
            out_.queue_seconds = queued.count();
            embedding_ = std::move(hidden);
            out_.error = std::move(error);
        }
        cv_.notify_all();
        notify_consumer();
    }

    const GenerationRequest req;
    const uint64_t arrival;  // FCFS order; the largest running one is preempted first
    const Clock::time_point submitted;
    std::optional<Clock::time_point> admitted;  // first admission (a preempted sequence keeps it)
    std::atomic<bool> cancelled{false};
    int row = -1;       // engine row while admitted
    bool joined = false;
    int64_t join_by = 0;  // the decode step by which its prefill should be done (SchedulerOptions::prefill_steps)
    bool prompt_counted = false;  // in prompt_tokens (once, whatever preemptions recompute it)
    bool prompt_scored = false;   // its prompt_logprobs were delivered (a recompute scores nothing)
    // A request submitted with this one (Scheduler::submit of a group) with the same prompt: this one waits until
    // that one's prompt_ready (its prompt's blocks are in the prefix cache, or it ended), then shares them.
    std::shared_ptr<Sequence> leader;
    bool prompt_ready = false;
    std::vector<int32_t> tokens;  // generated so far (kept across preemptions)
    Clock::time_point last_token;
    std::optional<grammar::Matcher> matcher;  // with a constraint: its state after `tokens`
    std::vector<uint32_t> mask;               // the allowed tokens the engine's row holds (empty: not written yet)

   private:
    void notify_consumer() {
        std::lock_guard<std::mutex> lock(notify_mu_);  // held while calling: on_update({}) waits for a call to end
        if (notify_) notify_();
    }

    std::shared_ptr<Signal> signal_;
    std::mutex mu_;
    std::condition_variable cv_;
    StreamUpdate out_;
    std::vector<float> embedding_;
    std::mutex notify_mu_;  // never held together with mu_
    std::function<void()> notify_;
};

}  // namespace

EngineOptions engine_options(const SchedulerOptions& o) {
    EngineOptions e;
    e.capture = o.capture;
    e.block_size = o.block_size;
    e.max_seqs = o.max_seqs;
    e.context = o.context;
    e.prefix_cache = o.prefix_cache;
    e.kv_blocks = o.kv_blocks;
    e.kv_sliding_blocks = o.kv_sliding_blocks;
    e.kv_dtype = o.kv_dtype;
    return e;
}

struct Scheduler::Impl {
    Impl(const Model& model, Backend& backend, const SchedulerOptions& o)
        : options(o), engine(model, backend, engine_options(o)), signal(std::make_shared<Signal>()),
          vocab(model.config().vocab_size) {
        // Before any request: a bucket's first use would otherwise stall every running stream for a warm-up step
        // and a capture, and a step's first write into fresh KV pool memory for the system to map it.
        engine.touch_kv();
        engine.capture_buckets();
        for (const int b : engine.buckets()) {
            if (engine.replay_seconds(b) > 0) pacer.seed_decode(b, engine.replay_seconds(b));
        }
        stats.kv_blocks_total = engine.kv_blocks_total();
        stats.kv_sliding_blocks_total = engine.kv_sliding_blocks_total();
        stats.block_size = o.block_size;
    }

    // Throws RequestError when `request` can never run.
    void check(const GenerationRequest& request) const;
    void loop();
    // One scheduler step; returns false when there is nothing to do.
    bool step();
    void drop_cancelled();
    void admit();
    // A prompt piece of the oldest sequence still being prefilled in the decode step's forward (Engine::mixed_step),
    // sharing the step's pass over the weights; false (nothing done) where the step cannot mix: nothing decodes, the
    // model's products depend on the forward's rows (Engine::can_mix), or that sequence's next forward is not a
    // plain prompt piece (a generated token's recompute, a scored prompt, an embedding).
    bool mixed_step();
    void prefill();
    void make_room();
    void decode();
    // Hands each decoding sequence its token of the step just run (`ids`: Engine::sampled()).
    void deliver_step(const std::vector<int32_t>& ids);
    // A sequence whose prefill just completed (its first token `first` sampled, unless it recomputed generated
    // tokens): its prompt scores, its embedding or its first token. False when that ended it with an error.
    bool prefilled(const std::shared_ptr<Sequence>& s, int32_t first);
    // Hands a sampled token to its sequence; ends the sequence on a stop id, max_new_tokens or a full context.
    void deliver(const std::shared_ptr<Sequence>& s, int32_t id, const sampling::TokenLogprobs* lp);
    // Writes a newly admitted sequence's logit_bias and token mask into its row.
    void write_adjust(Sequence& s);
    // The matcher's allowed tokens into the sequence's row, when they changed (or `force`).
    void write_mask(Sequence& s, bool force);
    // Both take the sequence by value: they erase it from `running`, which may hold its last reference (a client
    // gone without its cancellation processed yet), so a reference into `running` would dangle.
    void end(std::shared_ptr<Sequence> s, Finish f, std::string error = {}, std::vector<float> hidden = {});
    void preempt(std::shared_ptr<Sequence> s);
    // Ends every request, running or not, with Finish::Error and `why`.
    void end_all(const std::string& why);
    void publish_stats();

    const SchedulerOptions options;
    Engine engine;
    StepPacer pacer{options.max_step_stretch};
    std::shared_ptr<Signal> signal;
    std::thread thread;
    std::atomic<bool> stopping{false};
    std::atomic<bool> aborting{false};  // abort_all was called: its reason is in abort_reason

    mutable std::mutex mu;  // guards incoming, stats and abort_reason
    std::string abort_reason;
    std::vector<std::shared_ptr<Sequence>> incoming;
    SchedulerStats stats;
    uint64_t arrivals = 0;
    const int64_t vocab;
    std::vector<uint32_t> scratch_mask;  // write_mask's

    // Scheduler thread only.
    std::deque<std::shared_ptr<Sequence>> waiting;  // by arrival
    std::vector<std::shared_ptr<Sequence>> running;  // admitted, by arrival
    uint64_t preemptions = 0, finished = 0, prompt_tokens = 0, generated_tokens = 0;
    std::vector<double> ttft, itl, queued, e2e;  // observations since the last publish
};

Scheduler::Scheduler(const Model& model, Backend& backend, SchedulerOptions options)
    : impl_(std::make_unique<Impl>(model, backend, options)) {
    impl_->thread = std::thread([this] { impl_->loop(); });
}

Scheduler::~Scheduler() {
    impl_->stopping.store(true);
    impl_->signal->notify();
    impl_->thread.join();
}

int64_t Scheduler::context() const { return impl_->engine.context(); }

DType Scheduler::kv_dtype() const { return impl_->engine.kv_dtype(); }

SchedulerStats Scheduler::stats() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->stats;
}

std::shared_ptr<Stream> Scheduler::submit(GenerationRequest request) {
    std::vector<GenerationRequest> one;
    one.push_back(std::move(request));
    return submit(std::move(one)).front();
}

void Scheduler::Impl::check(const GenerationRequest& request) const {
    if (request.max_new_tokens < 1) throw RequestError("max_new_tokens must be at least 1");
    try {
        engine.check_prompt(request.prompt, 1);
        sampling::check_params(request.params);
        if (request.logit_bias.size() > static_cast<size_t>(sampling::kMaxLogitBias))
            throw RequestError("logit_bias holds more than " + std::to_string(sampling::kMaxLogitBias) + " tokens");
        for (const auto& [id, bias] : request.logit_bias) {
            if (id < 0 || id >= vocab || !std::isfinite(bias))
                throw RequestError("logit_bias: token " + std::to_string(id) + " is outside the vocabulary of " +
                                   std::to_string(vocab) + " or its bias is not finite");
        }
        if (request.constraint && request.constraint->vocab_size() != vocab)
            throw RequestError("the constraint was compiled for another vocabulary");
        if (request.prompt_logprobs < -1 || request.prompt_logprobs > sampling::kMaxLogprobs)
            throw RequestError("prompt_logprobs must be in [-1, " + std::to_string(sampling::kMaxLogprobs) + "]");
    } catch (const std::exception& e) {
        throw RequestError(e.what());
    }
}

std::vector<std::shared_ptr<Stream>> Scheduler::submit(std::vector<GenerationRequest> requests) {
    for (const GenerationRequest& r : requests) impl_->check(r);
    std::vector<std::shared_ptr<Sequence>> group;
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        const int max_waiting = impl_->options.max_waiting;
        if (static_cast<int64_t>(impl_->stats.waiting) + static_cast<int64_t>(requests.size()) > max_waiting)
            throw QueueFull("the server is busy: " + std::to_string(impl_->stats.waiting) +
                            " requests wait already (at most " + std::to_string(max_waiting) + ")");
        for (GenerationRequest& r : requests) {
            auto s = std::make_shared<Sequence>(std::move(r), impl_->arrivals++, impl_->signal);
            if (impl_->options.prefix_cache) {
                const auto same = std::find_if(group.begin(), group.end(),
                                               [&](const auto& g) { return g->req.prompt == s->req.prompt; });
                if (same != group.end()) s->leader = *same;
            }
            group.push_back(s);
            impl_->incoming.push_back(s);
            ++impl_->stats.waiting;
        }
    }
    impl_->signal->notify();
    return {group.begin(), group.end()};
}

void Scheduler::abort_all(std::string why) {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->abort_reason = std::move(why);
    }
    impl_->aborting.store(true);
    impl_->signal->notify();
}

void Scheduler::Impl::end_all(const std::string& why) {
    for (const auto& s : std::vector<std::shared_ptr<Sequence>>(running)) end(s, Finish::Error, why);
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& s : incoming) s->end(Finish::Error, why);
    for (const auto& s : waiting) s->end(Finish::Error, why);
    incoming.clear();
    waiting.clear();
}

void Scheduler::Impl::loop() {
    while (!stopping.load()) {
        if (aborting.load()) {
            std::string why;
            {
                std::lock_guard<std::mutex> lock(mu);
                why = abort_reason;
            }
            end_all(why);
        }
        bool busy = false;
        try {
            busy = step();
        } catch (const std::exception& e) {
            // An engine failure ends every admitted sequence with the error; the queue goes on at once (a step that
            // failed says nothing about whether requests still wait, so the loop must not sleep on it).
            std::fprintf(stderr, "scheduler: a step failed: %s\n", e.what());
            for (const auto& s : std::vector<std::shared_ptr<Sequence>>(running)) end(s, Finish::Error, e.what());
            engine.finish();
            busy = true;
        }
        publish_stats();
        if (!busy) {
            std::unique_lock<std::mutex> lock(signal->mu);
            signal->cv.wait(lock, [&] { return signal->pending || stopping.load(); });
            signal->pending = false;
        }
    }
    end_all("server shutting down");
}

bool Scheduler::Impl::step() {
    {
        std::lock_guard<std::mutex> lock(mu);
        for (auto& s : incoming) waiting.push_back(std::move(s));
        incoming.clear();
    }
    drop_cancelled();
    admit();
    if (!mixed_step()) {
        prefill();
        make_room();
        decode();
    }
    return !running.empty() || !waiting.empty();
}

void Scheduler::Impl::drop_cancelled() {
    for (const auto& s : std::vector<std::shared_ptr<Sequence>>(running)) {
        if (s->cancelled.load()) end(s, Finish::Cancelled);
    }
    for (auto it = waiting.begin(); it != waiting.end();) {
        if ((*it)->cancelled.load()) {
            (*it)->end(Finish::Cancelled);
            it = waiting.erase(it);
        } else {
            ++it;
        }
    }
}

void Scheduler::Impl::admit() {
    // FCFS: the oldest waiting request first, and none past it while it cannot get a row or its KV blocks.
    while (!waiting.empty()) {
        const std::shared_ptr<Sequence> s = waiting.front();
        if (s->leader && !s->leader->prompt_ready) return;
        s->leader.reset();
        const int64_t total = static_cast<int64_t>(s->req.prompt.size() + s->tokens.size());
        int row = -1;
        try {
            row = engine.admit(s->req.prompt, s->tokens, s->req.params, total + 1, {},
                               s->prompt_scored ? -1 : s->req.prompt_logprobs);
        } catch (const std::exception& e) {
            // The engine holds nothing for it (Engine::admit); it fails alone, the running set goes on.
            std::fprintf(stderr, "scheduler: admitting a request failed: %s\n", e.what());
            waiting.pop_front();
            ++finished;
            s->end(Finish::Error, e.what());
            continue;
        }
        if (row < 0) return;
        s->row = row;
        s->joined = false;
        s->join_by = engine.decode_steps() + options.prefill_steps;
        pacer.prompts_admitted(engine.prefill_left(row));
        if (!s->admitted) s->admitted = Clock::now();
        try {
            write_adjust(*s);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "scheduler: writing a request's logits adjustment failed: %s\n", e.what());
            waiting.pop_front();
            running.push_back(s);
            end(s, Finish::Error, e.what());
            continue;
        }
        if (!s->prompt_counted) prompt_tokens += s->req.prompt.size();
        s->prompt_counted = true;
        waiting.pop_front();
        running.insert(std::upper_bound(running.begin(), running.end(), s,
                                        [](const auto& a, const auto& b) { return a->arrival < b->arrival; }),
                       s);
    }
}

void Scheduler::Impl::prefill() {
    // A step computes at most max_batched_tokens tokens: one per decoding sequence, the rest prompt pieces (a
    // recompute's generated tokens count one each), oldest sequence first; the pieces also fit in the time the
    // pacer allows next to the decode step (StepPacer). So arriving prompts lengthen a step by a bounded amount and
    // never stall the running streams. Prompt pieces give the same bits wherever the budgets cut them
    // (Engine::next_prefill_tokens); a step's first piece always makes progress (Engine::min_prefill_budget).
    const auto decoding = std::count_if(running.begin(), running.end(), [](const auto& s) { return s->joined; });
    int64_t budget = std::max<int64_t>(options.max_batched_tokens - decoding, 3);
    double seconds = pacer.piece_seconds(engine.bucket(), engine.bucket_once_joined());
    bool progressed = false;
    for (const auto& s : std::vector<std::shared_ptr<Sequence>>(running)) {
        while (!s->joined) {
            const int64_t paced = pacer.tokens_for(seconds, budget);
            const int64_t n = engine.next_prefill_tokens(
                s->row, progressed ? paced : std::max(paced, engine.min_prefill_budget(s->row)));
            if (n == 0) break;
            budget -= n;
            progressed = true;
            int32_t first = 0;
            const Clock::time_point t0 = Clock::now();
            try {
                s->joined = engine.prefill(s->row, &first, n);
            } catch (const std::exception& e) {
                // A failed prompt forward ends its own request; the others go on.
                std::fprintf(stderr, "scheduler: a prompt forward failed: %s\n", e.what());
                end(s, Finish::Error, e.what());
                break;
            }
            const double took = std::chrono::duration<double>(Clock::now() - t0).count();
            pacer.piece_done(n, took);
            seconds -= took;
            if (s->joined && !prefilled(s, first)) break;
            if (s->joined) {
                // It decodes from now, so the rest of this step's pieces would delay its next token (a wave of
                // prompts at an idle server would be prefilled whole, one forward after another): where pieces can
                // go into decode steps, the next prompt's do, paced as beside any decoding stream; otherwise they get
                // what the pacer allows beside its decode step.
                if (options.mixed_steps && engine.can_mix()) return;
                seconds = std::min(seconds, pacer.piece_seconds(engine.bucket(), engine.bucket_once_joined()));
            }
        }
        if (s->row >= 0 && !s->joined) return;  // the next sequence waits for this one (FCFS)
    }
}

bool Scheduler::Impl::prefilled(const std::shared_ptr<Sequence>& s, int32_t first) {
    s->prompt_ready = true;
    if (s->req.prompt_logprobs >= 0 && !s->prompt_scored) {
        s->set_prompt_logprobs(engine.take_prompt_logprobs(s->row));
        s->prompt_scored = true;
    }
    if (s->req.embed) {
        // Read before any other forward overwrites it; the row's sampled first token is not delivered.
        std::vector<float> hidden;
        try {
            hidden = engine.prompt_hidden();
        } catch (const std::exception& e) {
            end(s, Finish::Error, e.what());
            return false;
        }
        end(s, Finish::Stop, {}, std::move(hidden));
    } else if (s->tokens.empty()) {
        const bool lp = s->req.params.logprobs >= 0;
        const sampling::TokenLogprobs t = lp ? engine.logprobs()[static_cast<size_t>(s->row)] : sampling::TokenLogprobs{};
        deliver(s, first, lp ? &t : nullptr);
    }
    return true;
}

bool Scheduler::Impl::mixed_step() {
    if (!options.mixed_steps || !engine.can_mix() ||
        std::none_of(running.begin(), running.end(), [](const auto& s) { return s->joined; }))
        return false;
    const auto it = std::find_if(running.begin(), running.end(), [](const auto& s) { return s->row >= 0 && !s->joined; });
    if (it == running.end() || (*it)->req.embed || !engine.mixable((*it)->row)) return false;
    const std::shared_ptr<Sequence> s = *it;
    make_room();  // the decoding rows' next blocks, as before a decode step
    if (s->row < 0 || engine.bucket() == 0) return false;  // preempted, or nothing decodes any more
    // The budgets of prefill(), for one piece.
    const auto decoding = std::count_if(running.begin(), running.end(), [](const auto& x) { return x->joined; });
    const int64_t budget = std::max<int64_t>(options.max_batched_tokens - decoding, 3);
    // The step's decode part runs over the decoding rows only (Engine::mixed_step): it costs about a decode step of
    // their bucket.
    const int decode_bucket = Engine::batch_bucket(static_cast<int>(decoding));
    const double seconds = pacer.piece_seconds(decode_bucket, engine.bucket_once_joined());
    int64_t tokens = pacer.tokens_for(seconds, budget, PieceForward::DecodeStep);
    if (options.prefill_steps > 0) {
        std::vector<PendingPrompt> pending;
        for (const auto& x : running) {
            if (x->row >= 0 && !x->joined)
                pending.push_back({engine.prefill_left(x->row), x->join_by - engine.decode_steps()});
        }
        tokens = mixed_prefill_tokens(tokens, even_prefill_tokens(pending), pacer.prompt_rate(), budget);
    }
    const int64_t n = engine.next_prefill_tokens(s->row, std::max(tokens, engine.min_prefill_budget(s->row)));
    int32_t first = 0;
    const Clock::time_point t0 = Clock::now();
    bool joined = false;
    try {
        joined = engine.mixed_step(s->row, &first, n);
    } catch (const PieceInputError& e) {
        // Nothing ran: the piece's request fails alone, as with a prompt forward of its own (prefill()). Any other
        // failure ends every admitted sequence (loop()).
        std::fprintf(stderr, "scheduler: a prompt forward failed: %s\n", e.what());
        end(s, Finish::Error, e.what());
        return true;
    }
    const std::vector<int32_t> ids = engine.sampled();
    // What a decode step of the decoding rows' bucket costs is the step's; the rest is the piece's (smaller than a
    // piece alone: the pass over the weights is shared).
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    pacer.piece_done(n, std::max(took - pacer.decode_cost(decode_bucket), 0.0), PieceForward::DecodeStep);
    pacer.step_ended();
    deliver_step(ids);
    s->joined = joined;
    if (joined) prefilled(s, first);
    return true;
}

void Scheduler::Impl::make_room() {
    // A decoding sequence that needs a block it cannot get frees the newest running one (possibly itself).
    for (std::vector<int> starved = engine.grow(); !starved.empty(); starved = engine.grow()) {
        preempt(running.back());
    }
}

void Scheduler::Impl::decode() {
    if (std::none_of(running.begin(), running.end(), [](const auto& s) { return s->joined; })) return;
    const int bucket = engine.bucket();
    const Clock::time_point t0 = Clock::now();
    engine.step();
    const std::vector<int32_t> ids = engine.sampled();
    pacer.decode_done(bucket, std::chrono::duration<double>(Clock::now() - t0).count());
    pacer.step_ended();
    deliver_step(ids);
}

void Scheduler::Impl::deliver_step(const std::vector<int32_t>& ids) {
    const bool any_lp = std::any_of(running.begin(), running.end(),
                                    [](const auto& s) { return s->joined && s->req.params.logprobs >= 0; });
    const std::vector<sampling::TokenLogprobs> lps =
        any_lp ? engine.logprobs() : std::vector<sampling::TokenLogprobs>{};
    for (const auto& s : std::vector<std::shared_ptr<Sequence>>(running)) {
        if (!s->joined) continue;
        const auto r = static_cast<size_t>(s->row);
        deliver(s, ids[r], s->req.params.logprobs >= 0 ? &lps[r] : nullptr);
    }
}

void Scheduler::Impl::deliver(const std::shared_ptr<Sequence>& s, int32_t id, const sampling::TokenLogprobs* lp) {
    const Clock::time_point now = Clock::now();
    const std::vector<int32_t>& stops = s->req.stop_ids;
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
        end(s, Finish::Stop);
        return;
    }
    // The masked step cannot sample a token the matcher refuses. An end-of-generation token taken without stop ids
    // (ignore_eos) ends the constraint, and the request with it, undelivered like a stop id.
    if (s->matcher && !s->matcher->accept(id)) {
        end(s, Finish::Error, "the constraint refused the sampled token " + std::to_string(id));
        return;
    }
    if (s->matcher && s->matcher->terminated()) {
        end(s, Finish::Stop);
        return;
    }
    const std::chrono::duration<double> since = now - (s->tokens.empty() ? s->submitted : s->last_token);
    (s->tokens.empty() ? ttft : itl).push_back(since.count());
    s->last_token = now;
    s->tokens.push_back(id);
    ++generated_tokens;
    s->push(id, lp);
    const auto n = static_cast<int64_t>(s->tokens.size());
    if (n >= s->req.max_new_tokens || static_cast<int64_t>(s->req.prompt.size()) + n >= engine.context()) {
        end(s, Finish::Length);
        return;
    }
    if (s->matcher) write_mask(*s, false);
}

void Scheduler::Impl::write_adjust(Sequence& s) {
    if (!s.req.logit_bias.empty()) engine.set_logit_bias(s.row, s.req.logit_bias);
    if (s.matcher) write_mask(s, true);
}

void Scheduler::Impl::write_mask(Sequence& s, bool force) {
    scratch_mask.resize(static_cast<size_t>(sampling::mask_words(vocab)));
    s.matcher->fill_mask(scratch_mask.data());
    if (!force && scratch_mask == s.mask) return;
    s.mask = scratch_mask;
    engine.set_token_mask(s.row, s.mask.data());
}

void Scheduler::Impl::end(std::shared_ptr<Sequence> s, Finish f, std::string error, std::vector<float> hidden) {
    const Clock::time_point now = Clock::now();
    queued.push_back(std::chrono::duration<double>(s->admitted.value_or(now) - s->submitted).count());
    e2e.push_back(std::chrono::duration<double>(now - s->submitted).count());
    engine.release(s->row);
    s->row = -1;
    running.erase(std::find(running.begin(), running.end(), s));
    ++finished;
    s->end(f, std::move(error), std::move(hidden));
}

void Scheduler::Impl::preempt(std::shared_ptr<Sequence> s) {
    engine.release(s->row);
    s->row = -1;
    s->joined = false;
    running.erase(std::find(running.begin(), running.end(), s));
    waiting.insert(std::upper_bound(waiting.begin(), waiting.end(), s,
                                    [](const auto& a, const auto& b) { return a->arrival < b->arrival; }),
                   s);
    ++preemptions;
}

void Scheduler::Impl::publish_stats() {
    std::lock_guard<std::mutex> lock(mu);
    stats.running = static_cast<int>(running.size());
    stats.waiting = static_cast<int>(waiting.size() + incoming.size());
    stats.kv_blocks_used = engine.kv_blocks_used();
    stats.kv_sliding_blocks_used = engine.kv_sliding_blocks_used();
    stats.prompt_tokens = prompt_tokens;
    stats.generated_tokens = generated_tokens;
    stats.requests_finished = finished;
    stats.preemptions = preemptions;
    stats.decode_steps = static_cast<uint64_t>(engine.decode_steps());
    stats.replays = static_cast<uint64_t>(engine.replays());
    stats.mixed_steps = static_cast<uint64_t>(engine.mixed_steps());
    stats.host_row_writes = engine.row_writes();
    stats.steady_steps = engine.steady_steps();
    stats.prefix_hit_tokens = static_cast<uint64_t>(engine.prefix_stats().hit_tokens);
    stats.prefix_query_tokens = static_cast<uint64_t>(engine.prefix_stats().query_tokens);
    for (const double v : ttft) stats.ttft_seconds.observe(v);
    for (const double v : itl) stats.itl_seconds.observe(v);
    ttft.clear();
    for (const double v : queued) stats.queue_seconds.observe(v);
    for (const double v : e2e) stats.e2e_seconds.observe(v);
    queued.clear();
    e2e.clear();
    itl.clear();
}

}  // namespace tracelm::serve
