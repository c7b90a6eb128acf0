// Subcommands of the `tracelm` executable. Each registers its options on the CLI11 app and returns
// the action to run once parsing succeeded.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace tracelm::cli {

using Action = std::function<int()>;

Action add_generate(CLI::App& app);
Action add_chat(CLI::App& app);
Action add_fetch_model(CLI::App& app);
Action add_tokenize(CLI::App& app);
Action add_make_checkpoint(CLI::App& app);
Action add_bench(CLI::App& app);
Action add_dsa_topk(CLI::App& app);
Action add_serve(CLI::App& app);
Action add_devices(CLI::App& app);

}  // namespace tracelm::cli
