#include "formats/safetensors.h"

#include "runtime/untrusted.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>

namespace tracelm {

// safetensors data is little-endian and handed out (or written) as raw host memory.
static_assert(std::endian::native == std::endian::little);

using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr size_t kMaxRank = 8;

// Shard paths carry names from the index file, so they are escaped too.
[[noreturn]] void fail(const std::string& path, const std::string& msg) {
    throw std::runtime_error(untrusted::escape(path, 4096) + ": " + msg);
}

bool parse_dtype(const std::string& s, DType& out) {
    static const std::pair<const char*, DType> table[] = {
        {"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16}, {"I32", DType::I32}, {"I64", DType::I64}};
    for (const auto& [name, dt] : table) {
        if (s == name) {
            out = dt;
            return true;
        }
    }
    return false;
}

// A JSON integer in [0, INT64_MAX]; nullopt for anything else (negative, float, string...).
std::optional<uint64_t> non_negative(const json& v) {
    if (!v.is_number_integer()) return std::nullopt;
    if (v.is_number_unsigned()) {
        const auto u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
        return u;
    }
    const auto s = v.get<int64_t>();
    if (s < 0) return std::nullopt;
    return static_cast<uint64_t>(s);
}

// Parses the header, rejecting repeated top-level keys (which json would silently collapse).
json parse_header(const std::string& path, const char* begin, const char* end) {
    std::set<std::string> seen;
    const json::parser_callback_t on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (untrusted::too_deep(depth, ev)) fail(path, "header: " + untrusted::DepthGuard::error());
        if (ev == json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second)
            fail(path, "header repeats key '" + untrusted::escape(parsed.get<std::string>()) + "'");
        return true;
    };
    try {
        return json::parse(begin, end, on_event);
    } catch (const json::exception& e) {
        fail(path, std::string("header is not valid JSON: ") + e.what());
    }
}

}  // namespace

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
    const untrusted::OpenedFile file = untrusted::open_regular_file(path);
    if (file.fd < 0) fail(path, file.error);
    const int fd = file.fd;
    const auto file_bytes = file.bytes;
    if (file_bytes < 8) {
        ::close(fd);
        fail(path, "file is " + std::to_string(file_bytes) + " bytes, too short for the 8-byte header length");
    }
    void* m = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);  // the mapping keeps its own reference to the file
    if (m == MAP_FAILED) fail(path, std::string("mmap failed: ") + std::strerror(map_errno));
    map_ = m;
    map_bytes_ = file_bytes;

    try {
        const auto* base = static_cast<const unsigned char*>(map_);
        uint64_t header_bytes = 0;
        for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(base[i]) << (8 * i);
        if (header_bytes > kMaxHeaderBytes)
            fail(path, "header length " + std::to_string(header_bytes) + " exceeds the 100 MB limit");
        if (header_bytes > file_bytes - 8)
            fail(path, "header length " + std::to_string(header_bytes) + " exceeds the " +
                           std::to_string(file_bytes - 8) + " bytes after it (truncated file?)");
        const char* text = reinterpret_cast<const char*>(base + 8);
        const json header = parse_header(path, text, text + header_bytes);
        if (!header.is_object()) fail(path, "header is not a JSON object");

        const unsigned char* data = base + 8 + header_bytes;
        const uint64_t data_bytes = file_bytes - 8 - header_bytes;
        for (const auto& [name, entry] : header.items()) {
            if (name == "__metadata__") {
                if (!entry.is_object()) fail(path, "__metadata__ is not an object");
                for (const auto& [k, v] : entry.items()) {
                    if (!v.is_string()) fail(path, "__metadata__ value of '" + untrusted::escape(k) + "' is not a string");
                    metadata_[k] = v.get<std::string>();
                }
                continue;
            }
            const std::string where = "tensor '" + untrusted::escape(name) + "': ";
            if (!entry.is_object()) fail(path, where + "entry is not an object");
            if (!entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
                fail(path, where + "needs dtype, shape and data_offsets");

            TensorInfo t;
            t.name = name;
            const json& dt = entry.at("dtype");
            if (!dt.is_string()) fail(path, where + "dtype is not a string");
            if (!parse_dtype(dt.get<std::string>(), t.dtype))
                fail(path, where + "unsupported dtype '" + untrusted::escape(dt.get<std::string>()) +
                               "' (supported: F32, BF16, F16, I32, I64)");

            const json& shape = entry.at("shape");
            if (!shape.is_array()) fail(path, where + "shape is not a list");
            if (shape.size() > kMaxRank)
                fail(path, where + "rank " + std::to_string(shape.size()) + " exceeds " + std::to_string(kMaxRank));
            bool has_zero = false;
            for (const json& d : shape) {
                const auto dim = non_negative(d);
                if (!dim) fail(path, where + "shape " + shape.dump() + " has an invalid dimension " + d.dump());
                t.shape.push_back(static_cast<int64_t>(*dim));
                has_zero = has_zero || *dim == 0;
            }
            // The element count (times the element size) must be representable; zero-sized
            // tensors are fine whatever their other dimensions.
            uint64_t nbytes = has_zero ? 0 : dtype_size(t.dtype);
            for (int64_t d : t.shape) {
                if (has_zero) break;
                if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(d), &nbytes))
                    fail(path, where + "shape " + shape.dump() + " overflows");
            }

            const json& off = entry.at("data_offsets");
            if (!off.is_array() || off.size() != 2) fail(path, where + "data_offsets is not a pair");
            const auto begin = non_negative(off[0]);
            const auto end = non_negative(off[1]);
            if (!begin || !end) fail(path, where + "data_offsets " + off.dump() + " are not non-negative integers");
            if (*begin > *end) fail(path, where + "data_offsets " + off.dump() + " are reversed");
            if (*end > data_bytes)
                fail(path, where + "data_offsets " + off.dump() + " exceed the data section of " +
                               std::to_string(data_bytes) + " bytes (truncated file?)");
            if (*end - *begin != nbytes)
                fail(path, where + "data_offsets " + off.dump() + " span " + std::to_string(*end - *begin) +
                               " bytes but shape " + shape.dump() + " of " + dt.get<std::string>() + " needs " +
                               std::to_string(nbytes));
            t.data = data + *begin;
            t.bytes = static_cast<size_t>(nbytes);
            tensors_.push_back(std::move(t));
        }

        std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
            return a.data < b.data || (a.data == b.data && a.bytes < b.bytes);
        });
        const TensorInfo* prev = nullptr;  // the non-empty tensor reaching furthest so far
        for (const TensorInfo& t : tensors_) {
            if (t.bytes == 0) continue;
            const auto* p = static_cast<const unsigned char*>(t.data);
            if (prev != nullptr && p < static_cast<const unsigned char*>(prev->data) + prev->bytes)
                fail(path, "tensors '" + untrusted::escape(prev->name) + "' and '" + untrusted::escape(t.name) + "' overlap");
            prev = &t;
        }
        std::sort(tensors_.begin(), tensors_.end(),
                  [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
    } catch (...) {
        unmap();
        throw;
    }
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tensors_(std::move(other.tensors_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
    if (this != &other) {
        unmap();
        path_ = std::move(other.path_);
        map_ = std::exchange(other.map_, nullptr);
        map_bytes_ = std::exchange(other.map_bytes_, 0);
        tensors_ = std::move(other.tensors_);
        metadata_ = std::move(other.metadata_);
    }
    return *this;
}

void SafetensorsFile::unmap() {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    map_ = nullptr;
    map_bytes_ = 0;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
    auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                               [](const TensorInfo& t, std::string_view n) { return t.name < n; });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

// ---- SafetensorsFolder ----

namespace {

// Shard names come from the index file; keep them to plain names inside the folder.
bool safe_shard_name(const std::string& s) {
    return !s.empty() && s.find('/') == std::string::npos && s.find('\\') == std::string::npos &&
           s.find("..") == std::string::npos && s.find('\0') == std::string::npos;
}

}  // namespace

SafetensorsFolder::SafetensorsFolder(const std::string& dir) : dir_(dir) {
    namespace fs = std::filesystem;
    const fs::path folder(dir);
    const fs::path single = folder / "model.safetensors";
    const fs::path index_path = folder / "model.safetensors.index.json";
    std::error_code ec;
    if (fs::is_regular_file(single, ec)) {
        files_.emplace_back(single.string());
        for (const TensorInfo& t : files_.front().tensors()) index_.emplace(t.name, &t);
        return;
    }
    if (!fs::is_regular_file(index_path, ec)) {
        if (!fs::is_directory(folder, ec)) fail(dir, "not a directory");
        fail(dir, "contains neither model.safetensors nor model.safetensors.index.json");
    }

    const std::string ipath = index_path.string();
    const std::string index_text = untrusted::read_regular_file(ipath, untrusted::kMaxSmallJsonFileBytes);
    json index;
    try {
        index = untrusted::parse_json(index_text);
    } catch (const std::runtime_error& e) {
        fail(ipath, e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object())
        fail(ipath, "has no weight_map object");
    const json& weight_map = index.at("weight_map");
    if (weight_map.empty()) fail(ipath, "weight_map is empty");

    std::map<std::string, size_t> shard_slot;
    for (const auto& [name, shard] : weight_map.items()) {
        if (!shard.is_string()) fail(ipath, "weight_map entry for '" + untrusted::escape(name) + "' is not a string");
        const auto file = shard.get<std::string>();
        if (!safe_shard_name(file))
            fail(ipath, "weight_map entry for '" + untrusted::escape(name) + "' names '" + untrusted::escape(file) + "', which is not a file in the folder");
        if (shard_slot.count(file) == 0) {
            shard_slot.emplace(file, files_.size());
            try {
                files_.emplace_back((folder / file).string());
            } catch (const std::runtime_error& e) {
                fail(ipath, "shard '" + untrusted::escape(file) + "' (listed for tensor '" + untrusted::escape(name) + "'): " + e.what());
            }
        }
    }
    for (const auto& [name, shard] : weight_map.items()) {
        const SafetensorsFile& f = files_[shard_slot.at(shard.get<std::string>())];
        const TensorInfo* t = f.find(name);
        if (t == nullptr) fail(ipath, "tensor '" + untrusted::escape(name) + "' is listed in " + untrusted::escape(f.path(), 4096) + ", which does not contain it");
        index_.emplace(name, t);
    }
}

const TensorInfo* SafetensorsFolder::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

const TensorInfo& SafetensorsFolder::get(std::string_view name) const {
    const TensorInfo* t = find(name);
    if (t == nullptr) throw std::runtime_error("missing tensor '" + std::string(name) + "' in " + dir_);
    return *t;
}

std::vector<std::string> SafetensorsFolder::names() const {
    std::vector<std::string> out;
    out.reserve(index_.size());
    for (const auto& kv : index_) out.push_back(kv.first);
    return out;
}

}  // namespace tracelm
