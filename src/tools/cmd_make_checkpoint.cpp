#include <iostream>

#include "model/checkpoint.h"
#include "tools/commands.h"

namespace tracelm::tools {

namespace {
struct MakeArgs {
    MakeCheckpointOptions opt;
    std::string dtype = "f32";
};
}  // namespace

Action add_make_checkpoint(CLI::App& app) {
    auto a = std::make_shared<MakeArgs>();
    app.add_option("--geometry", a->opt.geometry, "model geometry")->required()->check(CLI::IsMember({"tiny", "qwen3-0.6b"}));
    app.add_option("--seed", a->opt.seed, "random seed")->required();
    app.add_option("--out", a->opt.out_dir, "output folder")->required();
    app.add_option("--dtype", a->dtype, "weight dtype")->check(CLI::IsMember({"f32", "bf16"}));
    app.add_option("--tokenizer", a->opt.tokenizer_dir, "folder with tokenizer.json and tokenizer_config.json")
        ->check(CLI::ExistingDirectory);
    app.add_option("--max-shard-bytes", a->opt.max_shard_bytes, "split the weights into shards of at most this size");
    return [a] {
        a->opt.dtype = a->dtype == "bf16" ? DType::BF16 : DType::F32;
        make_random_checkpoint(a->opt);
        std::cout << "wrote " << a->opt.geometry << " checkpoint (" << a->dtype << ", seed " << a->opt.seed << ") to "
                  << a->opt.out_dir << "\n";
        return 0;
    };
}

}  // namespace tracelm::tools
