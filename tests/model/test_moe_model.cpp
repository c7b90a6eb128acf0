// Loading a Qwen3-MoE checkpoint (per-expert safetensors tensors stacked per layer): expert tensors that disagree with
// the config are refused naming the tensor, and a decode token is counted as reading only its chosen experts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "model/model.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

namespace fs = std::filesystem;

// The moe-tiny checkpoint with its config.json's `field` set to `value`, in `dir`.
std::string edited(const testing::TempDir& dir, const char* field, const nlohmann::json& value) {
    const std::string& src = testing::generated_checkpoint("moe-tiny", 7, DType::F32);
    const fs::path out = dir.str("moe");
    fs::create_directories(out);
    for (const auto& e : fs::directory_iterator(src)) fs::copy(e.path(), out / e.path().filename());
    std::ifstream in(out / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    in.close();
    config[field] = value;
    std::ofstream(out / "config.json") << config.dump();
    return out.string();
}

void expect_load_error(const std::string& path, const std::string& needle) {
    cpu::CpuBackend be(1);
    try {
        Model::load(path, be);
        ADD_FAILURE() << "loaded; expected an error mentioning " << needle;
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(MoeModel, ExpertTensorsThatDisagreeWithTheConfigAreRefusedByName) {
    {
        const testing::TempDir dir;
        expect_load_error(edited(dir, "num_experts", 9), "tensor 'model.layers.0.mlp.gate.weight' in");  // the router

    }
    {
        const testing::TempDir dir;
        expect_load_error(edited(dir, "moe_intermediate_size", 16),
                          "tensor 'model.layers.0.mlp.experts.0.gate_proj.weight' in");
    }
    {
        const testing::TempDir dir;
        expect_load_error(edited(dir, "num_experts_per_tok", 9), "num_experts_per_tok");
    }
}

TEST(MoeModel, ADecodeTokenReadsOnlyItsChosenExperts) {
    cpu::CpuBackend be(1);
    const auto m = Model::load(testing::generated_checkpoint("moe-tiny", 7, DType::F32), be);
    const ModelConfig& c = m->config();
    ASSERT_EQ(c.num_experts, 8);
    ASSERT_EQ(c.num_experts_per_tok, 2);
    const int64_t H = c.hidden_size, MI = c.moe_intermediate_size, q = c.q_dim(), kv = c.kv_dim();
    const int64_t attention = q * H * 2 + kv * H * 2, router = c.num_experts * H, experts = 3 * MI * H;
    const int64_t per_layer = attention + router + experts * c.num_experts_per_tok;
    EXPECT_EQ(m->decode_weight_bytes(),
              static_cast<size_t>((per_layer * c.num_hidden_layers + int64_t{c.vocab_size} * H) * 4));
    for (const LayerWeights& L : m->weights().layers) {
        ASSERT_TRUE(L.experts.has_value());
        EXPECT_EQ(L.experts->gate.rows, c.num_experts * MI);
        EXPECT_EQ(L.experts->down.rows, c.num_experts * H);
    }
}

}  // namespace
}  // namespace tracelm
