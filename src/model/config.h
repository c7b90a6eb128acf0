// Model hyper-parameters, read from a Hugging Face config.json or a GGUF file's metadata.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend.h"

namespace tracelm {

class GgufFile;

enum class Arch { Qwen3, Qwen2, Llama, Gemma3, Deepseek };

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
    bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3, Gemma 3)
    // Gemma 3: local layers attend to the last sliding_window positions only and rope with rope_local_theta (no
    // scaling); norms after attention and after the MLP too (sandwich_norms); RMSNorm weights w stored as Hugging
    // Face does, applied as (1 + w) (norm_weight_offset 1; GGUF files store 1 + w); embeddings scaled by embed_scale;
    // a GELU-gated MLP; attention scale query_pre_attn_scalar^-0.5.
    int sliding_window = 0;
    std::vector<uint8_t> layer_sliding;  // per layer: 1 for a sliding-window layer (empty: none)
    double rope_local_theta = 10000.0;
    bool sandwich_norms = false;
    float norm_weight_offset = 0.0f;
    float embed_scale = 1.0f;
    Activation hidden_act = Activation::Silu;
    double query_pre_attn_scalar = 0.0;  // 0: head_dim
    // Hugging Face tensor names start with this instead of "model." (the text model of a multimodal checkpoint).
    std::string weight_prefix = "model.";
    // Mixture of experts (Qwen3-MoE): num_experts 0 is a dense model. A layer with layer_moe set replaces its MLP by
    // num_experts SwiGLU experts of moe_intermediate_size, num_experts_per_tok of them chosen per token by a router
    // (weights renormalised when norm_topk_prob); the others keep the dense MLP (decoder_sparse_step, mlp_only_layers).
    int num_experts = 0;
    int num_experts_per_tok = 0;
    int moe_intermediate_size = 0;
    bool norm_topk_prob = false;
    std::vector<uint8_t> layer_moe;
    // DeepSeek-V3 / V3.2 (Arch::Deepseek; docs/deepseek-v32-plan.md): multi-head latent attention (queries through
    // a q_lora_rank latent, keys and values from one cached kv_lora_rank latent plus a shared qk_rope_head_dim rope
    // key; head_dim is qk_rope_head_dim, what the RoPE rotates), the V3.2 lightning indexer (index_n_heads 0: none,
    // dense attention as V3) keeping index_topk positions per query, and DeepSeek's MoE: sigmoid router scores, a
    // bias for the selection only, the best topk_group of n_group groups, weights times routed_scaling_factor, plus
    // n_shared_experts always-on experts (an MLP of n_shared_experts * moe_intermediate_size).
    struct Mla {
        int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
        int index_n_heads = 0, index_head_dim = 0, index_topk = 0;
        int n_group = 1, topk_group = 1, n_shared_experts = 0;
        float routed_scaling_factor = 1.0f;
        // The softmax scale's factor from YaRN (mscale(factor, mscale_all_dim)^2; 1 without YaRN).
        double scale_mscale2 = 1.0;
        // Values per token per layer in the latent cache (the latent, then the rope key).
        int latent_width() const { return kv_lora_rank + qk_rope_head_dim; }
    };
    std::optional<Mla> mla;
    bool is_moe(int layer) const {
        return static_cast<size_t>(layer) < layer_moe.size() && layer_moe[static_cast<size_t>(layer)] != 0;
    }
    std::optional<int> bos_token_id;
    std::vector<int> eos_token_ids;
    std::string torch_dtype;  // "torch_dtype" or, in newer files, "dtype"; empty if absent

    int q_dim() const { return num_attention_heads * head_dim; }
    bool is_sliding(int layer) const {
        return static_cast<size_t>(layer) < layer_sliding.size() && layer_sliding[static_cast<size_t>(layer)] != 0;
    }
    // The window of a layer's attention (0: the whole context).
    int attention_window(int layer) const { return is_sliding(layer) ? sliding_window : 0; }
    float attention_scale() const;  // DeepSeek: (nope + rope)^-0.5 times YaRN's mscale^2
    int kv_dim() const { return num_key_value_heads * head_dim; }
    // The divisors of the inverse frequencies the backends apply (RopeSpec::factors): both kinds of scaling
    // combined, or empty when there is none.
    std::vector<float> rope_factors() const;

    // Both throw std::runtime_error naming the source and the offending field.
    static ModelConfig from_file(const std::string& path);
    static ModelConfig from_json_text(const std::string& text, const std::string& source = "config.json");
    // From the metadata of a GGUF file (general.architecture llama, qwen2, qwen3, qwen3moe, gemma3, or deepseek2 /
    // deepseek32 as llama.cpp's converter writes DeepSeek-V3 / V3.2; the tensors tell whether the head is tied and
    // whether q/k/v carry biases).
    static ModelConfig from_gguf(const GgufFile& file);
};

}  // namespace tracelm
