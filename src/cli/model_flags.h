// The flags of every command that loads a model and runs it, defined once: which model (--model), and how it runs
// (--backend, --device, --threads, --context, --kv-type, --numerics, --no-prefix-cache).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "backends/registry.h"
#include "engine/engine.h"
#include "model/model.h"

namespace tracelm::cli {

struct ModelFlags {
    std::string model;  // empty: the default model, where the command has one
    std::string backend = "cpu";
    int device = 0;   // BackendOptions::device
    int threads = 0;  // 0: every core
    int64_t context = 4096;
    std::string kv_type;  // empty: the model's default (EngineOptions::kv_dtype)
    bool no_prefix_cache = false;
    bool dense_attention = false;
    Numerics numerics = Numerics::Ggml;
    const CLI::Option* numerics_given = nullptr;  // its count() says whether --numerics was given

    BackendOptions backend_options() const { return {threads, device}; }
    // The engine options these flags decide: context, KV dtype, prefix caching.
    EngineOptions engine_options() const;
};

// What a command's model flags differ in.
struct ModelFlagsUse {
    bool default_model = true;  // false: --model is required (bench measures a file it is given)
    bool context = true;        // false: the command sizes its own context (bench: prompt plus generated tokens)
    std::string numerics_default = "ggml";  // the default --numerics, as the help states it
};

void add_model_flags(CLI::App& app, ModelFlags& flags, const ModelFlagsUse& use = {});

}  // namespace tracelm::cli
