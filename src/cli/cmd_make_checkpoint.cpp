#include <charconv>
#include <iostream>
#include <limits>
#include <map>
#include <stdexcept>

#include "checkpoint/random_checkpoint.h"
#include "cli/commands.h"

namespace tracelm::cli {

namespace {
struct MakeArgs {
    MakeCheckpointOptions opt;
    std::string seed, max_shard_bytes = "0";  // parsed here: CLI11 wraps "-1" into an unsigned value
    std::string dtype = "f32";
    std::string format = "safetensors";
};

uint64_t parse_u64(const std::string& flag, const std::string& text) {
    uint64_t v = 0;
    const char* end = text.data() + text.size();
    const auto [p, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || p != end) {
        throw std::runtime_error(flag + " must be an integer in [0, " +
                                 std::to_string(std::numeric_limits<uint64_t>::max()) + "], got '" + text + "'");
    }
    return v;
}
}  // namespace

Action add_make_checkpoint(CLI::App& app) {
    auto a = std::make_shared<MakeArgs>();
    app.add_option("--geometry", a->opt.geometry, "model geometry")->required()->check(CLI::IsMember({"tiny", "qwen3-0.6b", "moe-tiny", "moe-small", "qwen3-30b-a3b-slice", "deepseek-tiny", "deepseek-v32-slice"}));
    app.add_option("--layers", a->opt.layers, "layers instead of the geometry's")->check(CLI::Range(1, 1024));
    app.add_option("--seed", a->seed, "random seed, in [0, 2^64)")->required();
    app.add_option("--out", a->opt.out, "output folder (safetensors) or file (gguf)")->required();
    app.add_option("--format", a->format, "safetensors: a Hugging Face folder; gguf: one GGUF file")
        ->check(CLI::IsMember({"safetensors", "gguf"}));
    app.add_option("--dtype", a->dtype, "weight dtype (f16, q8_0, q4_0, q4_k, q6_k: gguf only)")
        ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0", "q4_0", "q4_k", "q6_k"}));
    app.add_option("--tokenizer", a->opt.tokenizer_dir, "folder with tokenizer.json and tokenizer_config.json")
        ->check(CLI::ExistingDirectory);
    app.add_option("--max-shard-bytes", a->max_shard_bytes, "split the weights into shards of at most this size");
    return [a] {
        static const std::map<std::string, DType> kTypes = {
            {"f32", DType::F32}, {"bf16", DType::BF16}, {"f16", DType::F16}, {"q8_0", DType::Q8_0}, {"q4_0", DType::Q4_0},
            {"q4_k", DType::Q4_K}, {"q6_k", DType::Q6_K}};
        a->opt.seed = parse_u64("--seed", a->seed);
        a->opt.max_shard_bytes = parse_u64("--max-shard-bytes", a->max_shard_bytes);
        a->opt.dtype = kTypes.at(a->dtype);
        a->opt.format = a->format == "gguf" ? CheckpointFormat::Gguf : CheckpointFormat::Safetensors;
        make_random_checkpoint(a->opt);
        std::cout << "wrote " << a->opt.geometry << " checkpoint (" << a->format << ", " << a->dtype << ", seed "
                  << a->opt.seed << ") to " << a->opt.out << "\n";
        return 0;
    };
}

}  // namespace tracelm::cli
