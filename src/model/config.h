// Model hyper-parameters, read from a Hugging Face config.json.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tracelm {

class GgufFile;

enum class Arch { Qwen3, Qwen2, Llama };

std::string_view arch_name(Arch a);

struct ModelConfig {
    Arch arch = Arch::Qwen3;
    std::string architecture;  // architectures[0] as written, e.g. "MistralForCausalLM"
    int hidden_size = 0;
    int intermediate_size = 0;
    int num_hidden_layers = 0;
    int num_attention_heads = 0;
    int num_key_value_heads = 0;
    int head_dim = 0;
    float rms_norm_eps = 0.0f;
    double rope_theta = 10000.0;
    // RoPE frequency scaling. Every inverse frequency is divided by rope_linear_factor (Hugging Face rope_type
    // "linear"; GGUF rope.scaling.factor) and that of pair i by rope_freq_factors[i] when there are any (head_dim/2
    // values: Hugging Face rope_type "llama3", turned into factors as llama.cpp's converter does; GGUF tensor
    // rope_freqs.weight).
    double rope_linear_factor = 1.0;
    std::vector<float> rope_freq_factors;
    int vocab_size = 0;
    int max_position_embeddings = 0;
    bool tie_word_embeddings = false;
    bool attention_bias = false;  // q/k/v projections carry a bias
    bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
    std::optional<int> bos_token_id;
    std::vector<int> eos_token_ids;
    std::string torch_dtype;  // "torch_dtype" or, in newer files, "dtype"; empty if absent

    int q_dim() const { return num_attention_heads * head_dim; }
    int kv_dim() const { return num_key_value_heads * head_dim; }
    // The divisors of the inverse frequencies the backends apply (RopeSpec::factors): both kinds of scaling
    // combined, or empty when there is none.
    std::vector<float> rope_factors() const;

    // Both throw std::runtime_error naming the source and the offending field.
    static ModelConfig from_file(const std::string& path);
    static ModelConfig from_json_text(const std::string& text, const std::string& source = "config.json");
    // From the metadata of a GGUF file (general.architecture llama, qwen2 or qwen3; the tensors tell
    // whether the head is tied and whether q/k/v carry biases).
    static ModelConfig from_gguf(const GgufFile& file);
};

}  // namespace tracelm
