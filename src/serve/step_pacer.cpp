#include "serve/step_pacer.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tracelm::serve {

namespace {
// Moving-average weights of a new observation: decode steps repeat with the same shape, so a slow average rides out
// the machine's noise; pieces vary in size and the averages must hold several sizes for the fit, so they follow
// faster.
constexpr double kDecodeWeight = 0.1;
constexpr double kPieceWeight = 0.25;
// Prompts arrive in bursts (a wave of requests, then none while they decode), so the rate of prompt tokens per step
// averages over about as many steps as a request decodes for.
constexpr double kPromptRateWeight = 1.0 / 128;
// Prompts in mixed steps are prefilled at least this times the rate they arrive at (mixed_prefill_tokens).
constexpr double kCatchUp = 1.5;
// The variance of piece sizes (tokens squared) below which no slope is fitted.
constexpr double kMinSpread = 4.0;
}  // namespace

void StepPacer::seed_decode(int bucket, double seconds) { decode_[bucket].seed = seconds; }

void StepPacer::decode_done(int bucket, double seconds) {
    Cost& c = decode_[bucket];
    if (c.average > 0) {
        c.average += kDecodeWeight * (seconds - c.average);
        return;
    }
    c.average = seconds;
    if (c.seed > 0) seed_scale_ = seconds / c.seed;
}

void StepPacer::step_ended() {
    prompt_rate_ += kPromptRateWeight * (static_cast<double>(admitted_) - prompt_rate_);
    admitted_ = 0;
}

void StepPacer::piece_done(int64_t tokens, double seconds, PieceForward where) {
    pieces_[where == PieceForward::DecodeStep ? 1 : 0].add(static_cast<double>(tokens), seconds);
}

void StepPacer::PieceFit::add(double tokens, double seconds) {
    if (!seen) {
        n = tokens, t = seconds, nn = tokens * tokens, nt = tokens * seconds;
        seen = true;
        return;
    }
    n += kPieceWeight * (tokens - n);
    t += kPieceWeight * (seconds - t);
    nn += kPieceWeight * (tokens * tokens - nn);
    nt += kPieceWeight * (tokens * seconds - nt);
}

double StepPacer::PieceFit::per_token() const {
    if (!seen) return 0.0;
    // The slope needs pieces of different sizes; without them (or if noise makes the fit absurd: a falling cost or
    // a negative fixed part) the cost is taken as proportional, which is right for the size the pieces have.
    const double spread = nn - n * n;
    if (spread >= kMinSpread) {
        const double b = (nt - n * t) / spread;
        if (b > 0 && b * n <= t) return b;
    }
    return t / n;
}

double StepPacer::PieceFit::fixed() const { return seen ? t - per_token() * n : 0.0; }

double StepPacer::piece_per_token(PieceForward where) const { return fit(where).per_token(); }

double StepPacer::piece_fixed(PieceForward where) const { return fit(where).fixed(); }

double StepPacer::decode_cost(int bucket) const {
    const auto it = decode_.find(bucket);
    if (it == decode_.end()) return 0.0;
    return it->second.average > 0 ? it->second.average : it->second.seed * seed_scale_;
}

double StepPacer::piece_seconds(int decoding_bucket, int running_bucket) const {
    const double reference = decode_cost(running_bucket);
    if (stretch_ <= 0 || decoding_bucket == 0 || reference <= 0) return std::numeric_limits<double>::infinity();
    return std::max(0.0, stretch_ * reference - decode_cost(decoding_bucket));
}

int64_t even_prefill_tokens(const std::vector<PendingPrompt>& prompts) {
    int64_t ahead = 0, rate = 0;
    for (const PendingPrompt& p : prompts) {
        ahead += p.tokens;
        const int64_t steps = std::max<int64_t>(p.steps, 1);
        rate = std::max(rate, (ahead + steps - 1) / steps);
    }
    return rate;
}

int64_t mixed_prefill_tokens(int64_t paced, int64_t even, double prompt_rate, int64_t budget) {
    const auto keep_up = std::min(budget, static_cast<int64_t>(std::ceil(kCatchUp * prompt_rate)));
    return std::max(std::min(paced, even), keep_up);
}

int64_t StepPacer::tokens_for(double seconds, int64_t cap, PieceForward where) const {
    // Before the first piece in a decode step, a piece of its own bounds its cost (it pays a pass more).
    const PieceFit& f = fit(where).seen ? fit(where) : fit(PieceForward::Own);
    if (!f.seen) return cap;
    const double n = (seconds - f.fixed()) / f.per_token();
    if (!(n < static_cast<double>(cap))) return cap;
    return n > 0 ? static_cast<int64_t>(std::floor(n)) : 0;
}

}  // namespace tracelm::serve
