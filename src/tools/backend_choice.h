// The options of the commands that run a model that choose how it runs: --backend (choices from
// backends/registry.h), --kv-type and --no-prefix-cache.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/dtype.h"

namespace tracelm::tools {

// Adds `--backend NAME` (default "cpu") storing into `target`.
void add_backend_option(CLI::App& app, std::string& target);
// Adds `--kv-type f16|f32` storing into `target` (empty when not given).
void add_kv_type_option(CLI::App& app, std::string& target);
// Adds `--no-prefix-cache`, which sets `off`.
void add_prefix_cache_option(CLI::App& app, bool& off);
// The EngineOptions::kv_dtype of a --kv-type value: unset for "" (the model's default).
std::optional<DType> kv_dtype_option(const std::string& value);

}  // namespace tracelm::tools
