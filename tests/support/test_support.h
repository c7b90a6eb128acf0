// Shared fixtures for the tests: generated checkpoints and paths into the repository.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "checkpoint/model_cache.h"
#include "checkpoint/random_checkpoint.h"

namespace tracelm::testing {

inline std::string repo_path(const std::string& rel) { return std::string(TRACELM_SOURCE_DIR) + "/" + rel; }

// A path in the temporary directory private to this process, for a file a test writes.
inline std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("tracelm-" + std::to_string(getpid()) + "-" + name)).string();
}

// The bytes of a file of the repository ("" when it cannot be read).
inline std::string read_text(const std::string& rel) {
    std::ifstream in(repo_path(rel), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Real models in the model cache (checkpoint/model_cache.h: $TRACELM_CACHE or ~/.cache/tracelm, under models/):
// SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M. Tests that need one skip when it is absent, unless
// TRACELM_REQUIRE_MODELS is set (CI sets it after fetching the models), where a missing file fails them.
inline std::string cached_model_path(const std::string& name) {
    return cache_dir() + "/models/" + registry_model(name).file;
}
inline std::string smollm2_gguf_path() { return cached_model_path("smollm2"); }
inline std::string gemma3_gguf_path() { return cached_model_path("gemma3-270m"); }
#define TRACELM_NEED_CACHED_MODEL(path)                                                           \
    do {                                                                                          \
        if (!std::filesystem::exists(path)) {                                                     \
            if (std::getenv("TRACELM_REQUIRE_MODELS")) FAIL() << "missing " << (path);            \
            GTEST_SKIP() << (path) << " is not in the model cache (tracelm fetch-model)";         \
        }                                                                                         \
    } while (0)
#define TRACELM_NEED_SMOLLM2() TRACELM_NEED_CACHED_MODEL(::tracelm::testing::smollm2_gguf_path())
#define TRACELM_NEED_GEMMA3() TRACELM_NEED_CACHED_MODEL(::tracelm::testing::gemma3_gguf_path())

// Allocations made so far by the test process, on every thread and through every path (malloc and its relatives,
// every operator new, mmap): test_allocation_counter.cpp counts them.
inline std::atomic<uint64_t>& heap_allocations() {
    static std::atomic<uint64_t> count{0};
    return count;
}
// Those made by the calling thread.
inline uint64_t& thread_heap_allocations() {
    thread_local uint64_t count = 0;
    return count;
}

// A random-weight checkpoint made once per test process (removed at exit).
// layers > 0: that many layers instead of the geometry's.
inline const std::string& generated_checkpoint(const std::string& geometry, uint64_t seed, DType dtype,
                                               int layers = 0) {
    struct Cache {
        std::map<std::string, std::string> dirs;
        std::string root;
        ~Cache() {
            std::error_code ec;
            if (!root.empty()) std::filesystem::remove_all(root, ec);
        }
    };
    static Cache cache;
    std::string key = geometry + "-" + std::to_string(seed) + "-" + std::string(dtype_name(dtype));
    if (layers > 0) key += "-layers" + std::to_string(layers);
    auto it = cache.dirs.find(key);
    if (it != cache.dirs.end()) return it->second;
    if (cache.root.empty()) {
        cache.root = (std::filesystem::temp_directory_path() / ("tracelm-test-" + std::to_string(getpid()))).string();
    }
    MakeCheckpointOptions opt;
    opt.geometry = geometry;
    opt.seed = seed;
    opt.dtype = dtype;
    opt.layers = layers;
    opt.out = cache.root + "/" + key;
    opt.tokenizer_dir = repo_path("models/qwen3-tokenizer");
    make_random_checkpoint(opt);
    return cache.dirs.emplace(key, opt.out).first->second;
}

// The checkpoint a golden file was made from ({"geometry", "seed", "dtype", optional "layers", and "fnv1a64" or, for
// large ones, "sha256" of model.safetensors}), generated here and checked to hash as that one did:
// std::runtime_error when it does not (make-checkpoint's output changed; remake the goldens).
inline const std::string& golden_checkpoint(const nlohmann::json& ck) {
    const DType dtype = ck.value("dtype", std::string("f32")) == "bf16" ? DType::BF16 : DType::F32;
    const std::string& dir = generated_checkpoint(ck.at("geometry").get<std::string>(), ck.at("seed").get<uint64_t>(),
                                                  dtype, ck.value("layers", 0));
    const std::string key = ck.contains("sha256") ? "sha256" : "fnv1a64";
    std::string hash;
    if (key == "sha256") {
        hash = sha256_file(dir + "/model.safetensors");
    } else {
        char fnv[17];
        std::snprintf(fnv, sizeof(fnv), "%016llx",
                      static_cast<unsigned long long>(fnv1a64_file(dir + "/model.safetensors")));
        hash = fnv;
    }
    if (ck.at(key).get<std::string>() != hash) {
        throw std::runtime_error("the generated checkpoint's " + key + " is " + hash + ", not " +
                                 ck.at(key).get<std::string>() + ": it is not the one the goldens were made from");
    }
    return dir;
}

// A fresh folder under /tmp, removed with everything in it at scope exit.
class TempDir {
   public:
    TempDir() {
        char tmpl[] = "/tmp/tracelm_test_XXXXXX";
        if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    // The folder, or a file in it.
    std::string str(const std::string& name = "") const { return name.empty() ? path_.string() : (path_ / name).string(); }
    std::string file(const std::string& name) const { return str(name); }

   private:
    std::filesystem::path path_;
};

// A random Qwen3-MoE GGUF (seed 7) of `geometry` (moe-tiny; moe-small for the K types' widths) with matrices of
// type dt, written into dir as <geometry>-<dtype>.gguf; returns its path.
inline std::string random_moe_gguf(const TempDir& dir, DType dt, const std::string& geometry = "moe-tiny") {
    MakeCheckpointOptions o;
    o.geometry = geometry;
    o.seed = 7;
    o.format = CheckpointFormat::Gguf;
    o.dtype = dt;
    o.out = dir.str(geometry + "-" + std::string(dtype_name(dt)) + ".gguf");
    make_random_checkpoint(o);
    return o.out;
}

// Result of running the tracelm executable.
struct CliResult {
    int code;
    std::string out;
};

// Runs a shell command: its exit code and stdout.
inline CliResult run_command(const std::string& cmd) {
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// Runs `<env> tracelm <args>` through the shell (env: VAR=value assignments, may be empty); stdout, plus
// stderr when asked.
inline CliResult run_tracelm_env(const std::string& env, const std::string& args, bool with_stderr = true) {
    return run_command(env + " " + std::string(TRACELM_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}
inline CliResult run_tracelm(const std::string& args, bool with_stderr = true) { return run_tracelm_env("", args, with_stderr); }

// A two-thread CPU backend with helpers to upload host vectors, read tensors back and draw inputs.
class BackendTest : public ::testing::Test {
   protected:
    explicit BackendTest(uint32_t seed) : rng(seed) {}

    cpu::CpuBackend be{2};
    std::mt19937 rng;

    template <typename T>
    Tensor make(const std::string& name, DType dt, int64_t rows, int64_t cols, const std::vector<T>& data) {
        Tensor t = whole(be.alloc(static_cast<size_t>(rows * cols) * sizeof(T), name), dt, rows, cols);
        be.upload(t, data.data());
        return t;
    }
    Tensor f32(const std::string& name, int64_t rows, int64_t cols, const std::vector<float>& d) {
        return make(name, DType::F32, rows, cols, d);
    }
    Tensor i32(const std::string& name, int64_t rows, int64_t cols, const std::vector<int32_t>& d) {
        return make(name, DType::I32, rows, cols, d);
    }
    Tensor i64(const std::string& name, int64_t rows, int64_t cols, const std::vector<int64_t>& d) {
        return make(name, DType::I64, rows, cols, d);
    }
    std::vector<float> randn(size_t n) {
        std::normal_distribution<float> d;
        std::vector<float> v(n);
        for (auto& x : v) x = d(rng);
        return v;
    }
    template <typename T>
    std::vector<T> get(const Tensor& t) {
        std::vector<T> v(static_cast<size_t>(t.numel()));
        be.download(t, v.data());
        return v;
    }
};

// `n` token ids drawn uniformly from [0, vocab), the same for the same seed.
inline std::vector<int32_t> random_tokens(int n, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = d(rng);
    return t;
}

// `s` n times over.
inline std::string repeat(const std::string& s, int n) {
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) out += s;
    return out;
}

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The Isas whose kernels this CPU can run.
inline std::vector<cpu::Isa> runnable_isas() {
    std::vector<cpu::Isa> out;
    for (cpu::Isa isa : {cpu::Isa::Portable, cpu::Isa::Avx2, cpu::Isa::AvxVnni, cpu::Isa::Avx512})
        if (cpu::can_run(isa)) out.push_back(isa);
    return out;
}

}  // namespace tracelm::testing
