// Read-only, memory-mapped safetensors files and model folders made of them.
//
// Format: 8-byte little-endian header length N, N bytes of JSON header (an object mapping tensor
// names to {dtype, shape, data_offsets}, plus an optional "__metadata__" string map), then the data
// section the offsets are relative to. Everything is validated before any pointer is handed out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"

namespace tracelm {

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    // Into the mapping; only as aligned as the file makes it (HF writers keep it element-aligned).
    const void* data = nullptr;
    size_t bytes = 0;

    int64_t numel() const;
};

class SafetensorsFile {
   public:
    explicit SafetensorsFile(const std::string& path);  // throws std::runtime_error naming path
    ~SafetensorsFile();
    SafetensorsFile(SafetensorsFile&& other) noexcept;
    SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    // Sorted by name. The elements (and their data) stay put when the file object is moved.
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

   private:
    void unmap();

    std::string path_;
    void* map_ = nullptr;
    size_t map_bytes_ = 0;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, std::string> metadata_;
};

// A model folder: either "model.safetensors" or the shards listed by
// "model.safetensors.index.json" (preferred in that order, as transformers does).
class SafetensorsFolder {
   public:
    explicit SafetensorsFolder(const std::string& dir);  // throws std::runtime_error naming the file
    SafetensorsFolder(SafetensorsFolder&&) noexcept = default;
    SafetensorsFolder& operator=(SafetensorsFolder&&) noexcept = default;
    SafetensorsFolder(const SafetensorsFolder&) = delete;
    SafetensorsFolder& operator=(const SafetensorsFolder&) = delete;

    const std::string& dir() const { return dir_; }
    const TensorInfo* find(std::string_view name) const;  // null if absent
    const TensorInfo& get(std::string_view name) const;   // throws "missing tensor 'X' in <dir>"
    std::vector<std::string> names() const;               // sorted
    const std::vector<SafetensorsFile>& files() const { return files_; }

   private:
    std::string dir_;
    std::vector<SafetensorsFile> files_;
    // Points into files_' tensor vectors, whose storage survives moves of this object.
    std::map<std::string, const TensorInfo*, std::less<>> index_;
};

}  // namespace tracelm
