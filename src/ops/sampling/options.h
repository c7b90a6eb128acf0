// A request's sampling options as a user gives them (CLI flags), their validation, and the device row they
// become (ops/sampling/sampling.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ops/sampling/sampling.h"

namespace tracelm::sampling {

struct SamplingOptions {
    double temperature = 0.0;  // 0: greedy
    int64_t top_k = 0;         // 0: off
    double top_p = 1.0;
    double min_p = 0.0;
    double repeat_penalty = 1.0;
    double presence_penalty = 0.0;
    double frequency_penalty = 0.0;
    std::optional<uint64_t> seed;  // unset: a random one (reported back)
    std::optional<int> logprobs;   // n in [0, 20]: the chosen token's log-probability and the n best
};

// Throws std::invalid_argument naming the offending CLI flag (e.g. "--top-p must be in (0, 1], got 1.5").
void validate(const SamplingOptions& o);
// The seed a request uses: its own, or a fresh random one.
uint64_t resolve_seed(const SamplingOptions& o);
// The device row of validated options with `seed`.
RowParams row_params(const SamplingOptions& o, uint64_t seed);

}  // namespace tracelm::sampling
