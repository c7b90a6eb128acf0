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

void StepPacer::piece_done(int64_t tokens, double seconds) {
    const auto n = static_cast<double>(tokens);
    if (!pieces_) {
        n_ = n, t_ = seconds, nn_ = n * n, nt_ = n * seconds;
        pieces_ = true;
        return;
    }
    n_ += kPieceWeight * (n - n_);
    t_ += kPieceWeight * (seconds - t_);
    nn_ += kPieceWeight * (n * n - nn_);
    nt_ += kPieceWeight * (n * seconds - nt_);
}

double StepPacer::piece_per_token() const {
    if (!pieces_) return 0.0;
    // The slope needs pieces of different sizes; without them (or if noise makes the fit absurd: a falling cost or
    // a negative fixed part) the cost is taken as proportional, which is right for the size the pieces have.
    const double spread = nn_ - n_ * n_;
    if (spread >= kMinSpread) {
        const double b = (nt_ - n_ * t_) / spread;
        if (b > 0 && b * n_ <= t_) return b;
    }
    return t_ / n_;
}

double StepPacer::piece_fixed() const { return pieces_ ? t_ - piece_per_token() * n_ : 0.0; }

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

int64_t StepPacer::tokens_for(double seconds, int64_t cap) const {
    if (!pieces_) return cap;
    const double n = (seconds - piece_fixed()) / piece_per_token();
    if (!(n < static_cast<double>(cap))) return cap;
    return n > 0 ? static_cast<int64_t>(std::floor(n)) : 0;
}

}  // namespace tracelm::serve
