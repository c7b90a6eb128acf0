// A dense decoder-only transformer (Qwen3, Qwen2, Llama family) bound to a backend: configuration
// plus every weight as a device tensor.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"
#include "runtime/backend.h"

namespace tracelm {

struct LayerWeights {
    Tensor input_norm, post_norm;
    Tensor q_proj, k_proj, v_proj, o_proj;
    std::optional<Tensor> q_bias, k_bias, v_bias;  // f32 (Qwen2; any model with attention_bias)
    std::optional<Tensor> o_bias;                  // f32 (attention_bias outside Qwen2)
    std::optional<Tensor> q_norm, k_norm;          // per-head RMSNorm weights (Qwen3)
    Tensor gate_proj, up_proj, down_proj;
};

struct ModelWeights {
    Tensor embed;       // [vocab, hidden]
    Tensor final_norm;  // [1, hidden]
    Tensor lm_head;     // [vocab, hidden]; the embedding when tied
    std::vector<LayerWeights> layers;
};

class Model {
   public:
    // Opens a Hugging Face model folder (config.json + safetensors) and maps its weights.
    static std::unique_ptr<Model> load(const std::string& dir, Backend& backend);

    const ModelConfig& config() const { return config_; }
    const ModelWeights& weights() const { return weights_; }
    const std::string& dir() const { return dir_; }
    // Bytes of weights one decode token reads (every matrix once; a tied head counted once).
    size_t decode_weight_bytes() const { return decode_weight_bytes_; }
    DType weight_dtype() const { return weights_.layers.at(0).q_proj.dtype; }

   private:
    Model(std::string dir, ModelConfig config, Checkpoint checkpoint)
        : dir_(std::move(dir)), config_(std::move(config)), checkpoint_(std::move(checkpoint)) {}
    Tensor bind(Backend& backend, const std::string& name, int64_t rows, int64_t cols, bool as_f32);

    std::string dir_;
    ModelConfig config_;
    Checkpoint checkpoint_;
    ModelWeights weights_;
    size_t decode_weight_bytes_ = 0;
    std::vector<std::vector<float>> converted_;  // host copies of weights converted to f32 (biases)
};

}  // namespace tracelm
