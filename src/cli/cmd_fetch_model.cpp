// Fetches the default model into the cache (what generate does when --model is absent) and prints its path.
#include <cstdio>

#include "checkpoint/model_cache.h"
#include "cli/commands.h"

namespace tracelm::cli {

Action add_fetch_model(CLI::App&) {
    return [] {
        const std::string path =
            ensure_default_model([](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
        std::printf("%s\n", path.c_str());
        return 0;
    };
}

}  // namespace tracelm::cli
