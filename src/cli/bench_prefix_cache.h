// `tracelm bench --shared-prefix N`: time to first token of requests that share an N-token system prompt, with the
// prefix cache and without it, measured in the same run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "model/model.h"

namespace tracelm::cli {

// A fixed pseudo-random sequence of n ordinary token ids.
std::vector<int32_t> random_prompt(int n, int vocab_size, uint32_t seed);

struct PrefixBenchOptions {
    int system_tokens = 1024;
    int turn_tokens = 16;  // tokens of each user turn
    int turns = 8;         // requests measured (after one that fills the cache)
    std::optional<DType> kv_dtype;
};

// Runs the measurement and returns its JSON (ttft medians, ratio, hit counters, tokens_match).
nlohmann::json bench_prefix_cache(const Model& model, Backend& backend, const PrefixBenchOptions& opt);
// The table of bench_prefix_cache's result.
void print_prefix_bench(const nlohmann::json& j);

}  // namespace tracelm::cli
