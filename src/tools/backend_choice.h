// The options of the commands that run a model that choose how it runs: --backend (choices from
// backends/registry.h), --kv-type, --no-prefix-cache and --numerics.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "model/model.h"
#include "runtime/dtype.h"

namespace tracelm::tools {

// Adds `--backend NAME` (default "cpu") storing into `target`.
void add_backend_option(CLI::App& app, std::string& target);
// Adds `--kv-type f16|f32` storing into `target` (empty when not given).
void add_kv_type_option(CLI::App& app, std::string& target);
// Adds `--no-prefix-cache`, which sets `off`.
void add_prefix_cache_option(CLI::App& app, bool& off);
// Adds `--numerics ggml|fast` storing into `target`; `default_help` names the command's default in the help.
// Returns the option, whose count() says whether it was given.
CLI::Option* add_numerics_option(CLI::App& app, Numerics& target, const std::string& default_help = "ggml");
// The EngineOptions::kv_dtype of a --kv-type value: unset for "" (the model's default).
std::optional<DType> kv_dtype_option(const std::string& value);

}  // namespace tracelm::tools
