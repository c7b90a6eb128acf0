// Writing GGUF v3 files: the test fixtures and tools need models in GGUF form without Python.
// convert_to_gguf follows llama.cpp's converter for the parts tracelm reads (metadata keys, tensor
// names, and the q/k row permutation of the llama architecture).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace tracelm {

struct ModelConfig;

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

// The GGUF tensor name of a Hugging Face one ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"); names it does not know come back unchanged.
std::string gguf_tensor_name(const std::string& hf_name);

// The <arch>.* hyper-parameter keys and general.architecture, as llama.cpp reads them.
void add_arch_metadata(GgufWriter& w, const std::string& arch, const ModelConfig& c);

// The byte-level BPE tokenizer of a Hugging Face folder (tokenizer.json, tokenizer_config.json) as
// tokenizer.ggml.* keys, the way llama.cpp's converter writes them: model "gpt2", the vocabulary padded to
// vocab_size with "[PAD<id>]" tokens of type unused, added tokens of type control when special or spelled
// "<|...|>" and user-defined otherwise, merges as "left right", eos / padding ids from tokenizer_config.json's
// eos_token / pad_token, bos_id when given, add_bos_token, and the chat template. Only Qwen2's pre-tokenizer
// (tokenizer.ggml.pre "qwen2") is recognised; another is a std::runtime_error, as is a malformed file.
void add_bpe_tokenizer_metadata(GgufWriter& w, const std::string& tokenizer_dir, int64_t vocab_size,
                                std::optional<int32_t> bos_id);

// Writes the Hugging Face folder `hf_dir` (config.json + safetensors; Qwen3, Qwen2 or Llama) as a GGUF
// file with the same tensor dtypes; RoPE scaling goes where llama.cpp's converter puts it (linear: metadata keys;
// llama3: the tensor rope_freqs.weight).
void convert_to_gguf(const std::string& hf_dir, const std::string& out_path);

// A random-weight model of architecture `arch` (llama, qwen2, qwen3) whose matrices are of `dtype`
// (any weight dtype, quantized ones included: their blocks are random bytes with small scales) at a
// tiny geometry (hidden 256, 2 layers, vocab 512), deterministic in seed.
void make_random_gguf(const std::string& arch, DType dtype, uint64_t seed, const std::string& out_path);

}  // namespace tracelm
