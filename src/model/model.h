// A dense decoder-only transformer (Qwen3, Qwen2, Llama family, Gemma 3) bound to a backend: configuration
// plus every weight as a device tensor.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "runtime/backend.h"

namespace tracelm {

struct LayerWeights {
    Tensor input_norm, post_norm;  // the attention's and the MLP's input norms
    Tensor q_proj, k_proj, v_proj, o_proj;
    std::optional<Tensor> q_bias, k_bias, v_bias;  // f32 (Qwen2; any model with attention_bias)
    std::optional<Tensor> o_bias;                  // f32 (attention_bias outside Qwen2)
    std::optional<Tensor> q_norm, k_norm;          // per-head RMSNorm weights (Qwen3, Gemma 3)
    std::optional<Tensor> attn_out_norm, mlp_out_norm;  // norms of the attention's and the MLP's outputs (Gemma 3)
    Tensor gate_proj, up_proj, down_proj;  // unbound in a mixture-of-experts layer (DeepSeek: its shared experts)
    // A mixture-of-experts layer (ModelConfig::is_moe): the router [E, H] and the experts' matrices stacked as
    // moe_ffn takes them (runtime/backend.h MoeExperts), gate and up [E * I, H], down [E * H, I].
    struct Experts {
        Tensor router, gate, up, down;
        std::optional<Tensor> selection_bias;  // DeepSeek's e_score_correction_bias [E] (f32)
    };
    std::optional<Experts> experts;
    // DeepSeek's latent attention (ModelConfig::Mla) as the decoder runs it (docs/deepseek-v32-plan.md): the file's
    // q_b_proj and kv_a_proj_with_mqa split by rows into their no-RoPE and RoPE parts, the RoPE rows of each head
    // reordered from DeepSeek's interleaved pairs to NeoX's (q_pe . k_pe is unchanged); kv_b_proj split per head
    // into the absorbed key matrix, transposed ([heads * kv_lora, nope]: q_lat[h] = uk[h] . q_nope[h]), and the
    // value matrix [heads * v, kv_lora]. o_proj is LayerWeights::o_proj; in a MoE layer gate/up/down_proj hold the
    // shared experts.
    struct Mla {
        Tensor q_a, q_a_norm, q_nope, q_pe;  // [q_lora, H], [q_lora], [heads * nope, q_lora], [heads * rope, q_lora]
        Tensor kv_a, kv_a_norm, k_pe;        // [kv_lora, H], [kv_lora], [rope, H]
        Tensor uk, uv;
        // V3.2's lightning indexer: q [Hi * Di, q_lora], k [Di, H] with LayerNorm weight and bias [Di], per-head
        // weights [Hi, H] (unscaled: a positive constant factor changes no top-k selection).
        struct Indexer {
            Tensor wq, wk, k_norm, k_norm_bias, weights;
        };
        std::optional<Indexer> indexer;
    };
    std::optional<Mla> mla;
};

struct ModelWeights {
    Tensor embed;       // [vocab, hidden]
    Tensor final_norm;  // [1, hidden]
    Tensor lm_head;     // [vocab, hidden]; the embedding when tied
    std::vector<LayerWeights> layers;
};

// How quantized matmul weights are computed (src/backends/cpu/kernels/quant.h). Ggml: llama.cpp's CPU numbers,
// bit for bit. Fast: every GGML type repacked at load, 16 rows interleaved, for one float step per block (a different
// float order, so outputs differ from llama.cpp's by rounding); backends without the repacked types refuse it.
enum class Numerics { Ggml, Fast };

class Model {
   public:
    // Opens a Hugging Face model folder (config.json + safetensors) or a GGUF file and maps its weights.
    // `progress` (optional) sees (tensors bound, tensors in all) as the weights are paged in.
    // open(path), then require_supported and the binding of every weight.
    static std::unique_ptr<Model> load(const std::string& path, Backend& backend,
                                       const std::function<void(size_t, size_t)>& progress = {},
                                       Numerics numerics = Numerics::Ggml);
    // Reads the configuration and maps the file(s), binding nothing: what a backend is asked about.
    static std::unique_ptr<Model> open(const std::string& path);
    // Throws std::runtime_error naming `backend` and what it lacks unless it runs every weight type of the file
    // and this head_dim (BackendCapabilities).
    void require_supported(const BackendCapabilities& caps, const std::string& backend) const;

    const ModelConfig& config() const { return config_; }
    const ModelWeights& weights() const { return weights_; }
    // The folder, or the GGUF file.
    const std::string& path() const { return path_; }
    // The GGUF file (tokenizer and chat template live in its metadata); null for a folder.
    const GgufFile* gguf() const { return gguf_ ? &*gguf_ : nullptr; }
    // Parameters (elements of every weight tensor, a tied head counted once).
    int64_t parameters() const { return parameters_; }
    // Weight tensors per dtype, e.g. {q4_1: 210, f32: 61, q8_0: 1}.
    const std::map<DType, int>& dtype_counts() const { return dtype_counts_; }
    // Bytes of every tensor the file(s) store, read without binding (Model::open): about what binding them takes on a
    // device (biases become f32, the fast numerics repack); DeepSeek's quantized absorbed matrices count as the f32
    // they become.
    size_t stored_weight_bytes() const;
    // Bytes of weights one decode token reads (every matrix once; a tied head counted once).
    size_t decode_weight_bytes() const { return decode_weight_bytes_; }
    DType weight_dtype() const {
        const LayerWeights& l = weights_.layers.at(0);
        return l.mla ? l.mla->q_a.dtype : l.q_proj.dtype;
    }
    // The RoPE frequencies of a layer (theta and the scaling factors, computed once at load); Gemma's sliding-window
    // layers have their own base and no scaling.
    RopeSpec rope(int layer) const {
        if (config_.is_sliding(layer) && config_.arch == Arch::Gemma3)
            return {static_cast<float>(config_.rope_local_theta), {}};
        return {static_cast<float>(config_.rope_theta), rope_factors_};
    }

   private:
    // A weight as stored in the file: shape outermost first ([rows, cols] or [n]).
    struct Stored {
        DType dtype;
        std::vector<int64_t> shape;
        const void* data;
        size_t bytes;
    };
    explicit Model(std::string path) : path_(std::move(path)) {}
    // The tensor called `name` in Hugging Face naming, from whichever file backs the model.
    std::optional<Stored> find(const std::string& name) const;
    // Binds a weight as a device tensor. as_f32 converts it (biases); heads > 0 reorders the rows of
    // each of `heads` row groups from GGUF's interleaved-RoPE order back to the NeoX order.
    // matrix: a matmul weight or embedding table, which the fast numerics repack.
    // `pick` (non-empty): only those rows of the stored [rows, cols] tensor, in that order.
    Tensor bind(Backend& backend, const std::string& name, int64_t rows, int64_t cols, bool as_f32, int heads = 0,
                bool matrix = false, float add = 0.0f, const std::vector<int64_t>& pick = {});
    // DeepSeek's attention weights of the layer at `prefix` (LayerWeights::Mla).
    LayerWeights::Mla bind_mla(Backend& backend, const std::string& prefix);
    // The experts' `proj` weights (gate_proj, up_proj, down_proj; each rows x cols) of the layer at `prefix`,
    // stacked in expert order into one matrix: a folder's per-expert tensors, or GGUF's stacked one.
    Tensor bind_experts(Backend& backend, const std::string& prefix, const std::string& proj, int64_t rows,
                        int64_t cols);
    // An RMSNorm weight as the norm applies it: plus the config's norm_weight_offset (Gemma's 1 + w), in f32 then.
    Tensor bind_norm(Backend& backend, const std::string& name, int64_t cols);
    void bind_all(Backend& backend, const std::function<void(size_t, size_t)>& progress);

    std::string path_;
    ModelConfig config_;
    std::vector<float> rope_factors_;  // config_.rope_factors()
    std::optional<SafetensorsFolder> checkpoint_;
    std::optional<GgufFile> gguf_;
    ModelWeights weights_;
    size_t decode_weight_bytes_ = 0;
    int64_t parameters_ = 0;
    std::map<DType, int> dtype_counts_;
    Numerics numerics_ = Numerics::Ggml;
};

}  // namespace tracelm
