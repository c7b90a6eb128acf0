// The --backend option of the commands that run a model (choices from backends/registry.h).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace tracelm::tools {

// Adds `--backend NAME` (default "cpu") storing into `target`.
void add_backend_option(CLI::App& app, std::string& target);

}  // namespace tracelm::tools
