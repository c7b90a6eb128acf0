// Fetches a registry model into the cache (the default model is what generate uses without --model) and prints
// its path.
#include <cstdio>
#include <memory>

#include "checkpoint/model_cache.h"
#include "cli/commands.h"

namespace tracelm::cli {

Action add_fetch_model(CLI::App& app) {
    auto name = std::make_shared<std::string>(default_model().name);
    std::string names;
    for (const RegistryModel& m : registry_models()) names += (names.empty() ? "" : ", ") + m.name;
    app.add_option("name", *name, "the model: " + names)->capture_default_str();
    return [name] {
        const std::string path = ensure_model(registry_model(*name), [](const std::string& line) {
            std::fprintf(stderr, "%s\n", line.c_str());
        });
        std::printf("%s\n", path.c_str());
        return 0;
    };
}

}  // namespace tracelm::cli
