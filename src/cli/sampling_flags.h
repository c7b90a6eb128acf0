// The sampling flags `generate` and `chat` share, and the JSON of a request's log-probabilities.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/engine.h"
#include "ops/sampling/options.h"

namespace tracelm::cli {

// --temperature --top-k --top-p --min-p --repeat-penalty --presence-penalty --frequency-penalty --seed --logprobs.
void add_sampling_flags(CLI::App& app, sampling::SamplingOptions& o);
// One entry per token: {"id", "logprob", "top_logprobs": [{"id", "logprob"}, ...]}.
nlohmann::json logprobs_json(const std::vector<sampling::TokenLogprobs>& lps);

}  // namespace tracelm::cli
