// Writing safetensors files (header padded with spaces to a multiple of 8 bytes, like the reference writer),
// through a temporary name so that a failed write never leaves a plausible-looking file behind.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace tracelm {

struct TensorToWrite {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;  // row-major, exactly numel * dtype_size bytes
};

// Writes the tensors, in the given order, as one safetensors file. The default metadata is what transformers
// expects of a PyTorch checkpoint. Throws std::runtime_error naming the path.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

struct SafetensorsTensorSpec {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;

    // Null when a dimension is negative or the size does not fit in 64 bits.
    std::optional<uint64_t> byte_size() const;
    // For specs known to be valid (generated geometries).
    uint64_t bytes() const { return byte_size().value(); }
};

using ByteSink = std::function<void(const void* data, size_t bytes)>;

// As write_safetensors, with each tensor's data produced while the file is written, so that a large model never
// sits in memory: produce(i, sink) passes exactly specs[i].bytes() bytes to sink, in one or more pieces.
void write_safetensors_streamed(const std::string& path, const std::vector<SafetensorsTensorSpec>& specs,
                                const std::map<std::string, std::string>& metadata,
                                const std::function<void(size_t, const ByteSink&)>& produce);

}  // namespace tracelm
