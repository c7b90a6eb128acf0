#include "checkpoint/random_checkpoint.h"

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "formats/gguf_names.h"
#include "formats/quantize.h"
#include "formats/safetensors_writer.h"
#include "model/config.h"
#include "checkpoint/gguf_convert.h"
#include "checkpoint/rng.h"

namespace tracelm {

// safetensors data is little-endian and handed out (or written) as raw host memory.
static_assert(std::endian::native == std::endian::little);

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// ---- random Qwen3 checkpoints ----

std::string tokenizer_dir(const MakeCheckpointOptions& opts) {
    return opts.tokenizer_dir.empty() ? default_tokenizer_dir() : opts.tokenizer_dir;
}


// DeepSeek-V3.2 (DeepseekV32ForCausalLM; docs/deepseek-v32-plan.md): latent attention, the lightning indexer and
// DeepSeek's MoE (layers from first_dense on; Geometry's experts), with its own vocabulary when vocab > 0 (no
// tokenizer then) and the Qwen3 tokenizer's otherwise.
struct DeepseekGeometry {
    int q_lora, kv_lora, nope, rope, v, index_heads, index_dim, index_topk, n_group, topk_group, shared, first_dense;
    int vocab = 0;
};

struct Geometry {
    int hidden, intermediate, layers, heads, kv_heads, head_dim, max_positions;
    // Qwen3-MoE: every layer's MLP is `experts` experts of moe_intermediate, experts_per_tok chosen per token.
    int experts = 0, experts_per_tok = 0, moe_intermediate = 0;
    std::optional<DeepseekGeometry> deepseek = std::nullopt;
    int vocab() const;
};
constexpr int kQwen3Vocab = 151936;
int Geometry::vocab() const { return deepseek && deepseek->vocab > 0 ? deepseek->vocab : kQwen3Vocab; }

Geometry geometry_by_name(const std::string& name) {
    if (name == "tiny") return {64, 192, 2, 4, 2, 32, 4096};
    if (name == "qwen3-0.6b") return {1024, 3072, 28, 16, 8, 128, 40960};
    if (name == "moe-tiny") return {64, 192, 2, 4, 2, 32, 4096, 8, 2, 32};
    // As moe-tiny with every width a multiple of 256, the K types' block.
    if (name == "moe-small") return {256, 768, 2, 4, 2, 64, 4096, 8, 2, 256};
    // Qwen3-30B-A3B's layers (its config.json: hidden 2048, 32 query and 4 KV heads of 128, 128 experts of 768, 8
    // per token, context 40960), 8 of its 48 by default, with a tied head.
    if (name == "qwen3-30b-a3b-slice") return {2048, 6144, 8, 32, 4, 128, 40960, 128, 8, 768};
    // The shapes of testdata/models/tiny-deepseek-v32 (scripts/make_deepseek_checkpoint.py) with Qwen3's
    // vocabulary, so that its tokenizer serves it.
    if (name == "deepseek-tiny")
        return {64, 128, 3, 4, 4, 8, 163840, 8, 2, 32, DeepseekGeometry{32, 32, 16, 8, 16, 4, 32, 8, 4, 2, 1, 1}};
    // DeepSeek-V3.2's attention and indexer exactly (config.json: hidden 7168, 128 heads, q_lora_rank 1536,
    // kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128, 64 indexer heads of 128, index_topk 2048); 2 layers (the
    // first dense, intermediate 2048), 8 routed experts of 256 in 4 groups, 2 per token, a vocabulary of 4096.
    if (name == "deepseek-v32-slice")
        return {7168, 2048, 2, 128, 128, 64, 163840, 8, 2, 256,
                DeepseekGeometry{1536, 512, 128, 64, 128, 64, 128, 2048, 4, 2, 1, 1, 4096}};
    throw std::runtime_error("unknown checkpoint geometry '" + name +
                             "' (supported: tiny, qwen3-0.6b, moe-tiny, moe-small, qwen3-30b-a3b-slice, deepseek-tiny, "
                             "deepseek-v32-slice)");
}

// How a tensor's values are drawn: fan_in > 0: uniform in +-sqrt(3 / fan_in) (unit-variance
// outputs for unit-variance inputs); fan_in == 0: a norm weight, 1 + uniform(+-0.1).
struct RandomTensor {
    SafetensorsTensorSpec spec;
    int64_t fan_in;
};

// In HF's state-dict order, which also decides how shards are cut.
std::vector<RandomTensor> qwen3_tensors(const Geometry& g, DType dt) {
    const int64_t H = g.hidden, I = g.intermediate, q = int64_t{g.heads} * g.head_dim,
                  kv = int64_t{g.kv_heads} * g.head_dim, hd = g.head_dim;
    std::vector<RandomTensor> out;
    auto add = [&](std::string name, std::vector<int64_t> shape, int64_t fan_in) {
        out.push_back({{std::move(name), dt, std::move(shape)}, fan_in});
    };
    add("model.embed_tokens.weight", {kQwen3Vocab, H}, 3);  // fan_in 3: uniform +-1
    for (int l = 0; l < g.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "self_attn.q_proj.weight", {q, H}, H);
        add(p + "self_attn.k_proj.weight", {kv, H}, H);
        add(p + "self_attn.v_proj.weight", {kv, H}, H);
        add(p + "self_attn.o_proj.weight", {H, q}, q);
        add(p + "self_attn.q_norm.weight", {hd}, 0);
        add(p + "self_attn.k_norm.weight", {hd}, 0);
        if (g.experts > 0) {
            const int64_t MI = g.moe_intermediate;
            add(p + "mlp.gate.weight", {g.experts, H}, H);
            for (int e = 0; e < g.experts; ++e) {
                const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
                add(x + "gate_proj.weight", {MI, H}, H);
                add(x + "up_proj.weight", {MI, H}, H);
                add(x + "down_proj.weight", {H, MI}, MI);
            }
        } else {
            add(p + "mlp.gate_proj.weight", {I, H}, H);
            add(p + "mlp.up_proj.weight", {I, H}, H);
            add(p + "mlp.down_proj.weight", {H, I}, I);
        }
        add(p + "input_layernorm.weight", {H}, 0);
        add(p + "post_attention_layernorm.weight", {H}, 0);
    }
    add("model.norm.weight", {H}, 0);
    return out;
}

// In the order of scripts/make_deepseek_checkpoint.py's listing. Biases are drawn as weights of fan-in 300
// (uniform +-0.1).
std::vector<RandomTensor> deepseek_tensors(const Geometry& g, DType dt) {
    const DeepseekGeometry& d = *g.deepseek;
    const int64_t H = g.hidden, heads = g.heads, V = g.vocab();
    std::vector<RandomTensor> out;
    auto add = [&](std::string name, std::vector<int64_t> shape, int64_t fan_in) {
        out.push_back({{std::move(name), dt, std::move(shape)}, fan_in});
    };
    constexpr int64_t kBias = 300;
    add("model.embed_tokens.weight", {V, H}, 3);
    for (int l = 0; l < g.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".", a = p + "self_attn.";
        add(p + "input_layernorm.weight", {H}, 0);
        add(a + "q_a_proj.weight", {d.q_lora, H}, H);
        add(a + "q_a_layernorm.weight", {d.q_lora}, 0);
        add(a + "q_b_proj.weight", {heads * (d.nope + d.rope), d.q_lora}, d.q_lora);
        add(a + "kv_a_proj_with_mqa.weight", {d.kv_lora + d.rope, H}, H);
        add(a + "kv_a_layernorm.weight", {d.kv_lora}, 0);
        add(a + "kv_b_proj.weight", {heads * (d.nope + d.v), d.kv_lora}, d.kv_lora);
        add(a + "o_proj.weight", {H, heads * d.v}, heads * d.v);
        add(a + "indexer.wq_b.weight", {int64_t{d.index_heads} * d.index_dim, d.q_lora}, d.q_lora);
        add(a + "indexer.wk.weight", {d.index_dim, H}, H);
        add(a + "indexer.k_norm.weight", {d.index_dim}, 0);
        add(a + "indexer.k_norm.bias", {d.index_dim}, kBias);
        add(a + "indexer.weights_proj.weight", {d.index_heads, H}, H);
        add(p + "post_attention_layernorm.weight", {H}, 0);
        if (l < d.first_dense) {
            add(p + "mlp.gate_proj.weight", {g.intermediate, H}, H);
            add(p + "mlp.up_proj.weight", {g.intermediate, H}, H);
            add(p + "mlp.down_proj.weight", {H, g.intermediate}, g.intermediate);
            continue;
        }
        const int64_t MI = g.moe_intermediate, SI = MI * d.shared;
        add(p + "mlp.gate.weight", {g.experts, H}, H);
        add(p + "mlp.gate.e_score_correction_bias", {g.experts}, kBias);
        for (int e = 0; e < g.experts; ++e) {
            const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
            add(x + "gate_proj.weight", {MI, H}, H);
            add(x + "up_proj.weight", {MI, H}, H);
            add(x + "down_proj.weight", {H, MI}, MI);
        }
        add(p + "mlp.shared_experts.gate_proj.weight", {SI, H}, H);
        add(p + "mlp.shared_experts.up_proj.weight", {SI, H}, H);
        add(p + "mlp.shared_experts.down_proj.weight", {H, SI}, SI);
    }
    add("model.norm.weight", {H}, 0);
    add("lm_head.weight", {V, H}, H);
    return out;
}

// Hands the tensor's values to `sink` in order, in chunks of a whole number of 32-element blocks.
void random_values(const RandomTensor& t, uint64_t seed, const std::function<void(const float*, size_t)>& sink) {
    Xoshiro256 rng(SplitMix64(seed).next() ^ fnv1a64(t.spec.name));
    // sqrt and division are exactly rounded, so the scale is the same everywhere.
    const float scale = t.fan_in > 0 ? static_cast<float>(std::sqrt(3.0 / static_cast<double>(t.fan_in))) : 0.0f;
    constexpr int32_t kTenth = 838860;  // 0.1 * 2^23

    constexpr size_t kChunk = size_t{1} << 20;
    std::vector<float> vals(kChunk);
    uint64_t left = 1;
    for (int64_t d : t.spec.shape) left *= static_cast<uint64_t>(d);
    while (left > 0) {
        const size_t n = left < kChunk ? static_cast<size_t>(left) : kChunk;
        if (t.fan_in > 0) {
            for (size_t i = 0; i < n; ++i) vals[i] = rng.uniform_pm1() * scale;
        } else {
            // 1 + k * 2^-23 as one exact conversion, so no rounding (or FMA contraction) can differ.
            for (size_t i = 0; i < n; ++i) {
                const int32_t k = static_cast<int32_t>(rng.below(2 * kTenth + 1)) - kTenth;
                vals[i] = static_cast<float>((1 << 23) + k) * (1.0f / 8388608.0f);
            }
        }
        sink(vals.data(), n);
        left -= n;
    }
}

// The values stored as `dtype` (a plain float type or a GGUF block type) in the sink's pieces; with
// `round_to_bf16`, each value is first rounded to bf16.
void write_random_tensor(const RandomTensor& t, uint64_t seed, DType dtype, bool round_to_bf16,
                         const std::function<void(const void*, size_t)>& out) {
    std::vector<uint8_t> buf;
    std::vector<float> rounded;
    random_values(t, seed, [&](const float* v, size_t n) {
        if (round_to_bf16) {
            rounded.resize(n);
            for (size_t i = 0; i < n; ++i) rounded[i] = bf16_to_f32(f32_to_bf16(v[i]));
            v = rounded.data();
        }
        buf.resize(dtype_row_bytes(dtype, static_cast<int64_t>(n)));
        quantize_row(dtype, v, static_cast<int64_t>(n), buf.data());
        out(buf.data(), buf.size());
    });
}

json deepseek_config_json(const Geometry& g, DType dt) {
    const DeepseekGeometry& d = *g.deepseek;
    return json{
        {"architectures", {"DeepseekV32ForCausalLM"}},
        {"model_type", "deepseek_v32"},
        {"attention_bias", false},
        {"bos_token_id", d.vocab > 0 ? 0 : 151643},
        {"eos_token_id", d.vocab > 0 ? 1 : 151645},
        {"first_k_dense_replace", d.first_dense},
        {"hidden_act", "silu"},
        {"hidden_size", g.hidden},
        {"index_head_dim", d.index_dim},
        {"index_n_heads", d.index_heads},
        {"index_topk", d.index_topk},
        {"intermediate_size", g.intermediate},
        {"kv_lora_rank", d.kv_lora},
        {"max_position_embeddings", g.max_positions},
        {"moe_intermediate_size", g.moe_intermediate},
        {"moe_layer_freq", 1},
        {"n_group", d.n_group},
        {"n_routed_experts", g.experts},
        {"n_shared_experts", d.shared},
        {"norm_topk_prob", true},
        {"num_attention_heads", g.heads},
        {"num_experts_per_tok", g.experts_per_tok},
        {"num_hidden_layers", g.layers},
        {"num_key_value_heads", g.heads},
        {"num_nextn_predict_layers", 0},
        {"q_lora_rank", d.q_lora},
        {"qk_nope_head_dim", d.nope},
        {"qk_rope_head_dim", d.rope},
        {"rms_norm_eps", 1e-6},
        {"rope_scaling",
         {{"beta_fast", 32}, {"beta_slow", 1}, {"factor", 40}, {"mscale", 1.0}, {"mscale_all_dim", 1.0},
          {"original_max_position_embeddings", 4096}, {"type", "yarn"}}},
        {"rope_theta", 10000},
        {"routed_scaling_factor", 2.5},
        {"scoring_func", "sigmoid"},
        {"tie_word_embeddings", false},
        {"topk_group", d.topk_group},
        {"topk_method", "noaux_tc"},
        {"torch_dtype", dt == DType::BF16 ? "bfloat16" : "float32"},
        {"v_head_dim", d.v},
        {"vocab_size", g.vocab()},
    };
}

json qwen3_config_json(const Geometry& g, DType dt) {
    json j{
        {"architectures", {"Qwen3ForCausalLM"}},
        {"attention_bias", false},
        {"attention_dropout", 0.0},
        {"bos_token_id", 151643},
        {"eos_token_id", 151645},
        {"head_dim", g.head_dim},
        {"hidden_act", "silu"},
        {"hidden_size", g.hidden},
        {"initializer_range", 0.02},
        {"intermediate_size", g.intermediate},
        {"max_position_embeddings", g.max_positions},
        {"max_window_layers", g.layers},
        {"model_type", "qwen3"},
        {"num_attention_heads", g.heads},
        {"num_hidden_layers", g.layers},
        {"num_key_value_heads", g.kv_heads},
        {"rms_norm_eps", 1e-6},
        {"rope_scaling", nullptr},
        {"rope_theta", 1000000},
        {"sliding_window", nullptr},
        {"tie_word_embeddings", true},
        {"torch_dtype", dt == DType::BF16 ? "bfloat16" : "float32"},
        {"use_cache", true},
        {"use_sliding_window", false},
        {"vocab_size", kQwen3Vocab},
    };
    if (g.experts > 0) {
        j["architectures"] = {"Qwen3MoeForCausalLM"};
        j["model_type"] = "qwen3_moe";
        j["num_experts"] = g.experts;
        j["num_experts_per_tok"] = g.experts_per_tok;
        j["moe_intermediate_size"] = g.moe_intermediate;
        j["norm_topk_prob"] = true;
        j["decoder_sparse_step"] = 1;
        j["mlp_only_layers"] = json::array();
    }
    return j;
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) throw std::runtime_error(path.string() + ": write failed");
}

// Splits like huggingface_hub's split_state_dict_into_shards: a tensor larger than the limit gets
// a shard of its own (emitted at once), otherwise a shard is closed when the next tensor would
// push it over the limit.
std::vector<std::vector<size_t>> plan_shards(const std::vector<RandomTensor>& tensors, uint64_t max_bytes) {
    std::vector<std::vector<size_t>> shards;
    std::vector<size_t> current;
    uint64_t current_bytes = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const uint64_t b = tensors[i].spec.bytes();
        if (max_bytes == 0) {
            current.push_back(i);
            continue;
        }
        if (b > max_bytes) {
            shards.push_back({i});
            continue;
        }
        if (current_bytes + b > max_bytes && !current.empty()) {
            shards.push_back(std::move(current));
            current.clear();
            current_bytes = 0;
        }
        current.push_back(i);
        current_bytes += b;
    }
    if (!current.empty()) shards.push_back(std::move(current));
    return shards;
}

// Removes weight files an earlier run may have left, which would otherwise shadow or mix with ours.
void remove_old_weights(const fs::path& dir) {
    for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string n = entry.path().filename().string();
        const bool shard = n.rfind("model-", 0) == 0 && n.find("-of-") != std::string::npos &&
                           n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0;
        if (shard || n == "model.safetensors" || n == "model.safetensors.index.json") fs::remove(entry.path());
    }
}

// The same model as one GGUF file (general.architecture qwen3, the tokenizer in the metadata). Matrices are of
// the requested type, quantized from the f32 values; the norms are f32, as llama.cpp's converter keeps them,
// holding what a checkpoint of that dtype holds (the bf16 values for bf16); so is an MoE router.
// A mixture-of-experts geometry (general.architecture qwen3moe) stacks each layer's experts in one tensor per
// projection, ffn_{gate,up,down}_exps [E, rows, cols], as llama.cpp's converter does: the same values as the folder's
// per-expert tensors, expert after expert.
void write_random_gguf(const Geometry& g, const MakeCheckpointOptions& opts) {
    if (!can_quantize_to(opts.dtype))
        throw std::runtime_error("GGUF random checkpoints are f32, f16, bf16, q8_0, q4_0, q4_k or q6_k, not " +
                                 std::string(dtype_name(opts.dtype)));
    const ModelConfig c = ModelConfig::from_json_text(qwen3_config_json(g, opts.dtype).dump());
    GgufWriter w;
    add_arch_metadata(w, c.num_experts > 0 ? "qwen3moe" : std::string(arch_name(c.arch)), c);
    add_bpe_tokenizer_metadata(w, tokenizer_dir(opts), c.vocab_size, c.bos_token_id);
    const std::vector<RandomTensor> tensors = qwen3_tensors(g, DType::F32);
    for (size_t i = 0; i < tensors.size(); ++i) {
        const RandomTensor& t = tensors[i];
        // The MoE router (ffn_gate_inp) stays f32, as llama.cpp's converter and quantizer keep it.
        const bool router = t.spec.name.ends_with(".mlp.gate.weight");
        const DType dt = t.spec.shape.size() == 2 && !router ? opts.dtype : DType::F32;
        if (!dtype_row_ok(dt, t.spec.shape.back()))
            throw std::runtime_error("geometry " + opts.geometry + ": " + t.spec.name + " has rows of " +
                                     std::to_string(t.spec.shape.back()) + " values, not whole " +
                                     std::string(dtype_name(dt)) + " blocks of " +
                                     std::to_string(dtype_block_elems(dt)) + " (moe-small's widths fit every type)");
        const bool round_to_bf16 = dt == DType::F32 && opts.dtype == DType::BF16;
        const size_t experts = t.spec.name.find(".mlp.experts.") != std::string::npos ? static_cast<size_t>(g.experts) : 1;
        if (experts > 1) {
            // Expert 0's tensor stands for the stack; the others are written within it.
            const std::string& n = t.spec.name;
            if (n.find(".mlp.experts.0.") == std::string::npos) continue;
            const std::string stacked = n.substr(0, n.find(".mlp.experts.") + 13) + n.substr(n.find(".mlp.experts.0.") + 15);
            std::vector<RandomTensor> each;
            for (size_t e = 0; e < experts; ++e) each.push_back(tensors[i + 3 * e]);  // in order: gate, up, down
            w.add_tensor(gguf_tensor_name(stacked), dt,
                         {t.spec.shape[1], t.spec.shape[0], static_cast<int64_t>(experts)},
                         [each, seed = opts.seed, dt, round_to_bf16](const GgufWriter::Sink& sink) {
                             for (const RandomTensor& x : each) write_random_tensor(x, seed, dt, round_to_bf16, sink);
                         });
            continue;
        }
        w.add_tensor(gguf_tensor_name(t.spec.name), dt, {t.spec.shape.rbegin(), t.spec.shape.rend()},
                     [t, seed = opts.seed, dt, round_to_bf16](const GgufWriter::Sink& sink) {
                         write_random_tensor(t, seed, dt, round_to_bf16, sink);
                     });
    }
    w.write(opts.out);
}

std::string shard_name(size_t i, size_t n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    return buf;
}

}  // namespace

void make_random_checkpoint(const MakeCheckpointOptions& opts) {
    Geometry g = geometry_by_name(opts.geometry);
    if (opts.layers < 0 || opts.layers > 1024)
        throw std::runtime_error("random checkpoint: layers " + std::to_string(opts.layers) + " not in [0, 1024]");
    if (opts.layers > 0) g.layers = opts.layers;
    if (opts.out.empty()) throw std::runtime_error("random checkpoint: no output path given");
    if (opts.format == CheckpointFormat::Gguf) {
        if (g.deepseek) throw std::runtime_error("random checkpoint: DeepSeek geometries are written as safetensors only");
        write_random_gguf(g, opts);
        return;
    }
    if (opts.dtype != DType::F32 && opts.dtype != DType::BF16)
        throw std::runtime_error("random safetensors checkpoints are f32 or bf16, not " +
                                 std::string(dtype_name(opts.dtype)));
    const fs::path dir(opts.out);
    const fs::path tok(tokenizer_dir(opts));
    // A vocabulary of its own has no tokenizer.
    const bool with_tokenizer = g.vocab() == kQwen3Vocab;
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        if (with_tokenizer && !fs::is_regular_file(tok / f))
            throw std::runtime_error((tok / f).string() + ": missing (the random checkpoint copies it)");

    fs::create_directories(dir);
    remove_old_weights(dir);

    const std::vector<RandomTensor> tensors = g.deepseek ? deepseek_tensors(g, opts.dtype) : qwen3_tensors(g, opts.dtype);
    const auto shards = plan_shards(tensors, opts.max_shard_bytes);
    const std::map<std::string, std::string> metadata{{"format", "pt"}};
    json weight_map = json::object();
    uint64_t total_bytes = 0;
    for (size_t s = 0; s < shards.size(); ++s) {
        const std::string file = shards.size() == 1 ? "model.safetensors" : shard_name(s, shards.size());
        std::vector<SafetensorsTensorSpec> specs;
        for (size_t i : shards[s]) {
            specs.push_back(tensors[i].spec);
            weight_map[tensors[i].spec.name] = file;
            total_bytes += tensors[i].spec.bytes();
        }
        write_safetensors_streamed((dir / file).string(), specs, metadata, [&](size_t k, const ByteSink& out) {
            write_random_tensor(tensors[shards[s][k]], opts.seed, opts.dtype, false, out);
        });
    }
    if (shards.size() > 1) {
        // As transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n".
        const json index{{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
        write_text(dir / "model.safetensors.index.json", index.dump(2) + "\n");
    }
    write_text(dir / "config.json", (g.deepseek ? deepseek_config_json(g, opts.dtype) : qwen3_config_json(g, opts.dtype))
                                        .dump(2) + "\n");
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        if (with_tokenizer) fs::copy_file(tok / f, dir / f, fs::copy_options::overwrite_existing);
}

uint64_t fnv1a64_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open");
    std::vector<char> buf(size_t{1} << 20);
    uint64_t h = kFnv1a64Offset;
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        h = fnv1a64(std::string_view(buf.data(), static_cast<size_t>(in.gcount())), h);
    }
    if (in.bad()) throw std::runtime_error(path + ": read error");
    return h;
}

}  // namespace tracelm
