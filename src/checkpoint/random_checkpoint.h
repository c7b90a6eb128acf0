// Deterministic random Qwen3 (and DeepSeek-V3.2) checkpoints (safetensors folders or GGUF files) for tests and benchmarks.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/dtype.h"
#include "checkpoint/data_dir.h"

namespace tracelm {

enum class CheckpointFormat { Safetensors, Gguf };

struct MakeCheckpointOptions {
    // "tiny", "qwen3-0.6b", "moe-tiny" (Qwen3-MoE: 8 experts, 2 per token), "moe-small" (the same with widths of 256,
    // which the K types' blocks need) or "qwen3-30b-a3b-slice" (Qwen3-30B-A3B's layer shapes: 128 experts, 8 per
    // token; 8 layers), "deepseek-tiny" (DeepSeek-V3.2: latent attention, lightning indexer, DeepSeek MoE; Qwen3's
    // vocabulary) or "deepseek-v32-slice" (V3.2's attention and indexer shapes, 2 layers, its own 4096-token
    // vocabulary and no tokenizer).
    std::string geometry = "tiny";
    int layers = 0;  // > 0: this many layers instead of the geometry's
    uint64_t seed = 0;
    CheckpointFormat format = CheckpointFormat::Safetensors;
    std::string out;           // Safetensors: the folder; Gguf: the file
    DType dtype = DType::F32;  // F32 or BF16; Gguf also F16, Q8_0, Q4_0, Q4_K, Q6_K (see quantize.h)
    // tokenizer.json, tokenizer_config.json come from here; empty: default_tokenizer_dir()
    std::string tokenizer_dir;
    uint64_t max_shard_bytes = 0;  // 0: one model.safetensors; else HF-style shards plus index
};

// Writes config.json, the weights and the tokenizer files of a random Qwen3ForCausalLM into
// out (created if needed; earlier weight files there are removed), or with format Gguf the same model
// as one GGUF file `out` that llama.cpp loads (tokenizer in the metadata; max_shard_bytes unused). Every
// tensor is a pure function of (seed, its name, geometry, dtype), computed with integer arithmetic and
// exactly rounded float ops, so the bytes are identical on every machine and compiler, sharded and
// unsharded checkpoints hold the same values, and a GGUF file holds them (quantized for the block types).
// Tensors are streamed to disk in bounded memory.
void make_random_checkpoint(const MakeCheckpointOptions& opts);

// FNV-1a 64-bit over the file's bytes.
uint64_t fnv1a64_file(const std::string& path);

}  // namespace tracelm
