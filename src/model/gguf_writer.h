// Writing GGUF v3 files: the test fixtures and tools need models in GGUF form without Python.
// convert_to_gguf follows llama.cpp's converter for the parts tracelm reads (metadata keys, tensor
// names, and the q/k row permutation of the llama architecture).
#pragma once

#include <cstdint>
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
    // A tensor of `dtype` with ggml dims (innermost first) and its encoded bytes.
    void add_tensor(const std::string& name, DType dtype, std::vector<int64_t> dims, std::vector<uint8_t> bytes);
    // Throws std::runtime_error naming the path.
    void write(const std::string& path) const;

   private:
    struct Tensor {
        std::string name;
        uint32_t type;
        std::vector<int64_t> dims;
        std::vector<uint8_t> bytes;
    };
    void key(const std::string& k, uint32_t type);
    std::vector<uint8_t> kv_;
    uint64_t n_kv_ = 0;
    std::vector<Tensor> tensors_;
};

// The GGUF tensor name of a Hugging Face one ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"); names it does not know come back unchanged.
std::string gguf_tensor_name(const std::string& hf_name);

// Writes the Hugging Face folder `hf_dir` (config.json + safetensors; Qwen3, Qwen2 or Llama) as a GGUF
// file with the same tensor dtypes; RoPE scaling goes where llama.cpp's converter puts it (linear: metadata keys;
// llama3: the tensor rope_freqs.weight).
void convert_to_gguf(const std::string& hf_dir, const std::string& out_path);

// A random-weight model of architecture `arch` (llama, qwen2, qwen3) whose matrices are of `dtype`
// (any weight dtype, quantized ones included: their blocks are random bytes with small scales) at a
// tiny geometry (hidden 256, 2 layers, vocab 512), deterministic in seed.
void make_random_gguf(const std::string& arch, DType dtype, uint64_t seed, const std::string& out_path);

}  // namespace tracelm
