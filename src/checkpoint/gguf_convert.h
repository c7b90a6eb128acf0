// Models as GGUF files: Hugging Face folders converted the way llama.cpp's converter writes them, and random
// tiny models for tests. convert_to_gguf follows llama.cpp's converter for the parts tracelm reads (metadata keys,
// tensor names, and the q/k row permutation of the llama architecture).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "formats/gguf_writer.h"

namespace tracelm {

struct ModelConfig;

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
