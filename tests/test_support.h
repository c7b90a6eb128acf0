// Shared fixtures for the tests: generated checkpoints and paths into the repository.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "model/checkpoint.h"

namespace tracelm::testing {

inline std::string repo_path(const std::string& rel) { return std::string(TRACELM_SOURCE_DIR) + "/" + rel; }

// Heap allocations made so far by the test process: test_replay.cpp replaces operator new to count them.
inline std::atomic<uint64_t>& heap_allocations() {
    static std::atomic<uint64_t> count{0};
    return count;
}

// A random-weight checkpoint made once per test process (removed at exit).
inline const std::string& generated_checkpoint(const std::string& geometry, uint64_t seed, DType dtype) {
    struct Cache {
        std::map<std::string, std::string> dirs;
        std::string root;
        ~Cache() {
            std::error_code ec;
            if (!root.empty()) std::filesystem::remove_all(root, ec);
        }
    };
    static Cache cache;
    const std::string key = geometry + "-" + std::to_string(seed) + "-" + std::string(dtype_name(dtype));
    auto it = cache.dirs.find(key);
    if (it != cache.dirs.end()) return it->second;
    if (cache.root.empty()) {
        cache.root = (std::filesystem::temp_directory_path() / ("tracelm-test-" + std::to_string(getpid()))).string();
    }
    MakeCheckpointOptions opt;
    opt.geometry = geometry;
    opt.seed = seed;
    opt.dtype = dtype;
    opt.out_dir = cache.root + "/" + key;
    opt.tokenizer_dir = repo_path("models/qwen3-tokenizer");
    make_random_checkpoint(opt);
    return cache.dirs.emplace(key, opt.out_dir).first->second;
}

}  // namespace tracelm::testing
