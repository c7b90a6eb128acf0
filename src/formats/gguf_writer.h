// Writing GGUF v3 files: metadata keys and tensors, streamed so that a large model never sits in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace tracelm {

class GgufWriter {
   public:
    void add_u32(const std::string& key, uint32_t v);
    void add_f32(const std::string& key, float v);
    void add_bool(const std::string& key, bool v);
    void add_string(const std::string& key, const std::string& v);
    void add_string_array(const std::string& key, const std::vector<std::string>& v);
    void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
    // A tensor of `dtype` with ggml dims (innermost first) and its encoded bytes (exactly the size the dtype and
    // dims give, else std::invalid_argument).
    void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> dims, std::vector<uint8_t> bytes);
    // A tensor whose bytes are made while the file is written, so that a large model never sits in memory:
    // produce(sink) passes them to sink in one or more pieces, exactly the tensor's size in all.
    using Sink = std::function<void(const void* data, size_t bytes)>;
    void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> dims,
                    std::function<void(const Sink&)> produce);
    // Throws std::runtime_error naming the path; a failed write leaves no file behind.
    void write(const std::string& path) const;

   private:
    struct Tensor {
        std::string name;
        uint32_t type;
        std::vector<int64_t> dims;
        uint64_t bytes;
        std::function<void(const Sink&)> produce;
    };
    void key(const std::string& k, uint32_t type);
    std::vector<uint8_t> kv_;
    uint64_t n_kv_ = 0;
    std::vector<Tensor> tensors_;
};

}  // namespace tracelm
