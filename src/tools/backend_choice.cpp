#include "tools/backend_choice.h"

#include <map>
#include <vector>

#include "backends/registry.h"

namespace tracelm::tools {

void add_backend_option(CLI::App& app, std::string& target) {
    std::vector<std::string> names;
    for (const BackendInfo& b : backend_registry()) names.push_back(b.name);
    app.add_option("--backend", target, "device backend: " + backend_names() + " (default cpu)")
        ->check(CLI::IsMember(names));
}

void add_kv_type_option(CLI::App& app, std::string& target) {
    app.add_option("--kv-type", target,
                   "KV cache values: f16 (llama.cpp's CPU attention numbers) or f32 (default: f16 for GGUF models, f32 "
                   "for safetensors checkpoints)")
        ->check(CLI::IsMember({"f16", "f32"}));
}

void add_prefix_cache_option(CLI::App& app, bool& off) {
    app.add_flag("--no-prefix-cache", off,
                 "recompute every prompt instead of sharing the KV blocks of cached prefixes");
}

CLI::Option* add_numerics_option(CLI::App& app, Numerics& target, const std::string& default_help) {
    return app
        .add_option("--numerics", target,
                    "quantized matmuls: ggml (llama.cpp's CPU numbers, bit for bit) or fast (GGML weights repacked at "
                    "load, one float step per block: faster prefill and batches, outputs equal to llama.cpp's up to "
                    "rounding; cpu backend); default: " +
                        default_help)
        ->transform(CLI::CheckedTransformer(std::map<std::string, Numerics>{{"ggml", Numerics::Ggml},
                                                                            {"fast", Numerics::Fast}}));
}

std::optional<DType> kv_dtype_option(const std::string& value) {
    if (value.empty()) return std::nullopt;
    return value == "f16" ? DType::F16 : DType::F32;
}

}  // namespace tracelm::tools
