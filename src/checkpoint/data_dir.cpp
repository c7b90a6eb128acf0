#include "checkpoint/data_dir.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace tracelm {

namespace fs = std::filesystem;

std::string data_path(const std::string& name) {
    std::vector<fs::path> dirs;
    if (const char* env = std::getenv("TRACELM_DATA_DIR"); env != nullptr && *env != '\0') {
        dirs.emplace_back(env);
    } else {
        std::error_code ec;
        const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
        if (!ec) {
            dirs.push_back(exe_dir.parent_path() / "share" / "tracelm");
            dirs.push_back(exe_dir / "share" / "tracelm");
        }
    }
    std::string looked;
    for (const fs::path& d : dirs) {
        std::error_code ec;
        if (fs::exists(d / name, ec)) return (d / name).string();
        looked += (looked.empty() ? "" : ", ") + (d / name).string();
    }
    throw std::runtime_error("tracelm data file '" + name + "' not found (looked at: " +
                             (looked.empty() ? std::string("nowhere: /proc/self/exe unreadable") : looked) +
                             "; set TRACELM_DATA_DIR)");
}

std::string default_tokenizer_dir() { return data_path("qwen3-tokenizer"); }

}  // namespace tracelm
