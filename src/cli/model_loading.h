// What the commands that run a model share: resolving --model (the default model when empty),
// loading weights with a progress bar, the tokenizer, and the one-line model summary.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/prompt.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tracelm::cli {

struct LoadedModel {
    std::unique_ptr<Model> model;
    Tokenizer tokenizer;
    std::vector<int32_t> end_ids;  // end_of_generation_ids (engine/prompt.h)
};

// `path` empty: the default model (fetched into the cache when absent). Progress goes to stderr,
// as a bar on a terminal. Before any weight is read, require_fits with `engine`.
LoadedModel load_model(const std::string& path, Backend& backend, Numerics numerics, const EngineOptions& engine);
// Throws std::runtime_error naming both sizes when the model's weights and the KV cache of an engine of `engine`
// exceed the backend's memory_capacity() (a GPU's device-local heap); nothing on backends without one.
void require_fits(const std::string& path, const Backend& backend, const EngineOptions& engine);
// "llama, 134.5M parameters (q4_1 x210, f32 x61, q8_0 x1), context 8192 (using 4096), KV cache 90.0 MiB f16".
std::string model_summary(const Model& model, const Engine& engine);
// The weight tensors per type as loaded ("q4_0_r16 x7, f32 x9": repacked types name what the fast numerics made).
std::string weight_types(const Model& model);

struct GenerationStats {
    std::vector<int32_t> tokens;  // sampled ids, the end-of-generation token included
    double prefill_s = 0, decode_s = 0;
    int decode_steps = 0;
    std::vector<sampling::TokenLogprobs> logprobs;  // one per token, when the parameters asked for them
};
// Generation of up to max_tokens for one prompt with `params` (default: greedy), stopping after one of `end_ids`;
// on_token sees each sampled id as soon as the host reads it (between replays). `decoded`: the prompt's spans that
// decode generated (Engine::admit).
GenerationStats generate(Engine& engine, const std::vector<int32_t>& end_ids, const std::vector<int32_t>& prompt,
                         int max_tokens, const std::function<void(int32_t)>& on_token,
                         const sampling::RowParams& params = {}, const std::vector<TokenSpan>& decoded = {});

}  // namespace tracelm::cli
