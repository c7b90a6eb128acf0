#include "ops/sampling/options.h"

#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

namespace tracelm::sampling {

namespace {

[[noreturn]] void bad(const char* flag, const std::string& rule, double got) {
    std::ostringstream m;
    m << flag << " must be " << rule << ", got " << got;
    throw std::invalid_argument(m.str());
}

// Finite and, as a float (what the device reads), still within [lo, hi].
void in_range(const char* flag, double v, double lo, double hi, bool lo_open, const std::string& rule) {
    const auto f = static_cast<float>(v);
    if (!std::isfinite(v) || !std::isfinite(f) || (lo_open ? f <= lo : f < lo) || f > hi) bad(flag, rule, v);
}

}  // namespace

void validate(const SamplingOptions& o) {
    constexpr double kBig = 3.0e38;
    in_range("--temperature", o.temperature, 0.0, kBig, false, "a finite number >= 0");
    if (o.top_k < 0 || o.top_k > INT32_MAX) bad("--top-k", "an integer >= 0 (0: off)", static_cast<double>(o.top_k));
    in_range("--top-p", o.top_p, 0.0, 1.0, true, "in (0, 1]");
    in_range("--min-p", o.min_p, 0.0, 1.0, false, "in [0, 1]");
    in_range("--repeat-penalty", o.repeat_penalty, 0.0, kBig, true, "a finite number > 0");
    in_range("--presence-penalty", o.presence_penalty, -kBig, kBig, false, "a finite number");
    in_range("--frequency-penalty", o.frequency_penalty, -kBig, kBig, false, "a finite number");
    if (o.logprobs && (*o.logprobs < 0 || *o.logprobs > kMaxLogprobs)) bad("--logprobs", "in [0, 20]", *o.logprobs);
}

uint64_t resolve_seed(const SamplingOptions& o) {
    if (o.seed) return *o.seed;
    std::random_device rd;
    return (uint64_t{rd()} << 32) | rd();
}

RowParams row_params(const SamplingOptions& o, uint64_t seed) {
    RowParams p;
    p.temperature = static_cast<float>(o.temperature);
    p.top_k = static_cast<int32_t>(o.top_k);
    p.top_p = static_cast<float>(o.top_p);
    p.min_p = static_cast<float>(o.min_p);
    p.repetition_penalty = static_cast<float>(o.repeat_penalty);
    p.presence_penalty = static_cast<float>(o.presence_penalty);
    p.frequency_penalty = static_cast<float>(o.frequency_penalty);
    p.seed_lo = static_cast<uint32_t>(seed);
    p.seed_hi = static_cast<uint32_t>(seed >> 32);
    p.logprobs = o.logprobs.value_or(-1);
    return p;
}

}  // namespace tracelm::sampling
