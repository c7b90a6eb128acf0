// `tracelm devices`: each backend of the registry with its devices, numbered as --device takes them, or why this
// process cannot use it.
#include <cstdio>

#include "backends/registry.h"
#include "cli/commands.h"

namespace tracelm::cli {

Action add_devices(CLI::App&) {
    return [] {
        for (const BackendInfo& b : backend_registry()) {
            const std::string why = b.unavailable();
            if (!why.empty()) {
                std::printf("%s: unavailable: %s\n", b.name.c_str(), why.c_str());
                continue;
            }
            std::printf("%s:\n", b.name.c_str());
            for (const std::string& line : b.devices()) std::printf("  %s\n", line.c_str());
        }
        return 0;
    };
}

}  // namespace tracelm::cli
