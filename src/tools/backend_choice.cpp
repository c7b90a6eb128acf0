#include "tools/backend_choice.h"

#include <vector>

#include "backends/registry.h"

namespace tracelm::tools {

void add_backend_option(CLI::App& app, std::string& target) {
    std::vector<std::string> names;
    for (const BackendInfo& b : backend_registry()) names.push_back(b.name);
    app.add_option("--backend", target, "device backend: " + backend_names() + " (default cpu)")
        ->check(CLI::IsMember(names));
}

}  // namespace tracelm::tools
