// Models from GGUF files: the same weights from safetensors and from GGUF, captured decode == eager decode for
// every weight type and architecture, the random Qwen3 checkpoints that make-checkpoint writes as GGUF (same
// model as the safetensors ones; quantized within the block types' error; the tokenizer in the metadata), and
// RoPE scaling as llama.cpp stores it (rope_freqs.weight, rope.scaling.*), read and written, and malformed
// scaling refused. (Transformers-saved checkpoints converted to GGUF are checked against transformers' logits
// in test_arch_goldens.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/kernels.h"
#include "engine/engine.h"
#include "model/config.h"
#include "formats/gguf.h"
#include "formats/gguf_names.h"
#include "checkpoint/gguf_convert.h"
#include "formats/safetensors.h"
#include "runtime/rope.h"
#include "support/test_support.h"
#include "tokenizer/tokenizer.h"

namespace tracelm {
namespace {

// Greedy tokens of `steps` decode steps and the logits after the last (KV cache: the model's default unless given).
std::pair<std::vector<int32_t>, std::vector<float>> decode(const Model& model, Backend& be, bool capture, int steps,
                                                           const std::vector<int32_t>& prompt,
                                                           std::optional<DType> kv_dtype = std::nullopt) {
    EngineOptions opt;
    opt.capture = capture;
    opt.kv_dtype = kv_dtype;
    opt.context = 256;
    Engine engine(model, be, opt);
    std::vector<int32_t> tokens = {engine.start({prompt}, steps + 1)[0]};
    for (int i = 0; i < steps; ++i) {
        engine.step();
        tokens.push_back(engine.sampled()[0]);
    }
    auto logits = engine.logits();
    engine.finish();
    return {tokens, logits};
}

TEST(GgufModels, SameQwen3WeightsFromSafetensorsAndGgufGiveSameLogits) {
    const std::string dir = testing::generated_checkpoint("tiny", 11, DType::F32);
    const std::string path = testing::temp_path("qwen3-tiny.gguf");
    convert_to_gguf(dir, path);
    cpu::CpuBackend be(2);
    const auto st = Model::load(dir, be);
    const auto gg = Model::load(path, be);
    const std::vector<int32_t> prompt = {1, 5, 9, 200, 77, 3};
    // (The two formats default to different KV caches, so each is tried with both.)
    for (const DType kv : {DType::F32, DType::F16}) {
        const auto a = decode(*st, be, true, 20, prompt, kv);
        const auto b = decode(*gg, be, true, 20, prompt, kv);
        EXPECT_EQ(a.first, b.first) << dtype_name(kv);
        EXPECT_EQ(a.second, b.second) << dtype_name(kv);  // same kernels on the same bytes: bit for bit
    }
    std::filesystem::remove(path);
}

class EveryType : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(EveryType, ReplayedDecodeEqualsEagerFor128Steps) {
    const auto& [arch, dtype] = GetParam();
    const std::string path = testing::temp_path(arch + "-" + std::string(dtype_name(dtype)) + ".gguf");
    const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79};
    // Some random models fall into a one-token loop, which would make the comparison prove little: take
    // the first seed whose greedy sequence is varied.
    bool varied = false;
    for (uint64_t seed = 1; seed <= 6 && !varied; ++seed) {
        make_random_gguf(arch, dtype, seed, path);
        cpu::CpuBackend be(2);
        const auto model = Model::load(path, be);
        EXPECT_EQ(model->weights().layers[0].q_proj.dtype, dtype);
        const auto eager = decode(*model, be, false, 128, prompt);
        const auto replay = decode(*model, be, true, 128, prompt);
        EXPECT_EQ(eager.first, replay.first) << "seed " << seed;
        EXPECT_EQ(eager.second, replay.second) << "seed " << seed;
        varied = std::set<int32_t>(eager.first.begin(), eager.first.end()).size() >= 4;
    }
    EXPECT_TRUE(varied);
    std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    Types, EveryType,
    ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3"),
                       ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                                         DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K)),
    [](const auto& p) {
        return std::get<0>(p.param) + "_" + std::string(dtype_name(std::get<1>(p.param)));
    });

// ---- random Qwen3 checkpoints as GGUF (make-checkpoint --format gguf) ----

// The tiny checkpoint of `seed` as a GGUF file of `dtype`, written once per test process.
const std::string& random_gguf(DType dtype, uint64_t seed) {
    static testing::TempDir dir;
    static std::map<std::string, std::string> made;
    const std::string name = "tiny-" + std::to_string(seed) + "-" + std::string(dtype_name(dtype)) + ".gguf";
    if (auto it = made.find(name); it != made.end()) return it->second;
    MakeCheckpointOptions o;
    o.geometry = "tiny";
    o.seed = seed;
    o.format = CheckpointFormat::Gguf;
    o.dtype = dtype;
    o.out = dir.file(name);
    o.tokenizer_dir = testing::repo_path("models/qwen3-tokenizer");
    make_random_checkpoint(o);
    return made.emplace(name, o.out).first->second;
}

std::vector<float> row_f32(const void* data, DType dt, int64_t cols, int64_t row) {
    std::vector<float> out(static_cast<size_t>(cols));
    cpu::row_to_f32(static_cast<const uint8_t*>(data) + static_cast<size_t>(row) * dtype_row_bytes(dt, cols), dt, cols,
                    out.data());
    return out;
}

// The largest distance a value may be from its quantized form, for the 32-element block of f32 values at x:
// Q8_0 rounds x / d to an integer (d = max|x| / 127, within half a step) and stores d as f16 (relative error
// 2^-11, times |q| <= 127); Q4_0 steps by |d| = max|x| / 8 and clips the one value of opposite sign to the
// largest at 7 steps instead of 8 (a full step), with d also stored as f16; F16 rounds each value (half an
// ulp: relative 2^-11, or 2^-25 among subnormals).
double quantization_bound(DType dt, const float* x, int64_t j) {
    double amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
    switch (dt) {
        case DType::Q8_0: return amax / 127 * (0.5 + 127 * 0x1p-11);
        case DType::Q4_0: return amax / 8 * (1 + 8 * 0x1p-11);
        case DType::F16: return std::max(std::fabs(static_cast<double>(x[j])) * 0x1p-11, 0x1p-25);
        default: return 0;  // F32 and BF16 hold the safetensors values exactly
    }
}

class RandomGguf : public ::testing::TestWithParam<DType> {};

TEST_P(RandomGguf, HoldsTheSafetensorsCheckpointsWeights) {
    const DType dt = GetParam();
    const GgufFile g(random_gguf(dt, 5));
    // The bf16 GGUF holds the bf16 checkpoint; the others are made from the f32 values.
    const SafetensorsFolder ck(testing::generated_checkpoint("tiny", 5, dt == DType::BF16 ? DType::BF16 : DType::F32));
    EXPECT_EQ(g.get_string("general.architecture"), "qwen3");
    EXPECT_EQ(g.get_u32("qwen3.block_count"), 2u);
    EXPECT_EQ(g.find_tensor("output.weight"), nullptr);  // tied to token_embd, as in the config
    ASSERT_EQ(g.tensors().size(), ck.names().size());
    for (const std::string& name : ck.names()) {
        SCOPED_TRACE(name);
        const TensorInfo& st = ck.get(name);
        const GgufTensor& gt = g.get_tensor(gguf_tensor_name(name));
        const bool matrix = st.shape.size() == 2;
        EXPECT_EQ(gt.dims, std::vector<int64_t>(st.shape.rbegin(), st.shape.rend()));
        ASSERT_EQ(gt.dtype, matrix ? dt : DType::F32);  // norms stay f32
        const int64_t cols = st.shape.back(), rows = matrix ? st.shape[0] : 1;
        for (int64_t r = 0; r < rows; ++r) {
            const auto want = row_f32(st.data, st.dtype, cols, r), got = row_f32(gt.data, *gt.dtype, cols, r);
            for (int64_t k = 0; k < cols; ++k) {
                const float* block = want.data() + k / 32 * 32;
                ASSERT_LE(std::fabs(static_cast<double>(got[k]) - want[k]),
                          matrix ? quantization_bound(dt, block, k % 32) : 0.0)
                    << "row " << r << " col " << k;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, RandomGguf,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

const std::vector<int32_t> kPrompt = {9707, 11, 1879, 0, 785, 6722, 315, 9625, 374};

TEST(RandomGgufModel, SameLogitsAsTheSafetensorsCheckpointForF32AndBf16) {
    for (DType dt : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(std::string(dtype_name(dt)));
        cpu::CpuBackend be(2);
        const auto st = Model::load(testing::generated_checkpoint("tiny", 5, dt), be);
        const auto gg = Model::load(random_gguf(dt, 5), be);
        const auto a = decode(*st, be, true, 16, kPrompt, DType::F32);  // one KV cache type for both
        const auto b = decode(*gg, be, true, 16, kPrompt, DType::F32);
        EXPECT_EQ(a.first, b.first);
        EXPECT_EQ(a.second, b.second);
    }
}

// The quantized models' logits against the f32 model's, at the end of a prompt followed by 16 greedy tokens of
// the f32 model. The relative RMS error of one matmul: weights uniform in a block's +-amax have RMS amax/sqrt(3)
// and a rounding error of RMS step/sqrt(12), step = amax/127 (Q8_0) or amax/8 (Q4_0), so relative 1/254 and
// 1/16; the 8-bit activations add about 1/200 (normal values, block max about 2.2 sigma). Through two layers'
// residual stream and the head the logits may carry up to 4 times that (measured: 2.5 to 2.7 times).
TEST(RandomGgufModel, QuantizedLogitsStayWithinTheBlockTypesError) {
    cpu::CpuBackend be(2);
    const auto f32 = Model::load(random_gguf(DType::F32, 5), be);
    std::vector<int32_t> prompt = kPrompt;
    const auto greedy = decode(*f32, be, true, 16, kPrompt).first;
    prompt.insert(prompt.end(), greedy.begin(), greedy.end() - 1);
    const auto exact = decode(*f32, be, false, 1, prompt).second;
    auto rms = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x * x;
        return std::sqrt(s / static_cast<double>(v.size()));
    };
    const double activation_err = 1.0 / 200;
    for (const auto& [dt, weight_err] : {std::pair{DType::Q8_0, 1.0 / 254}, std::pair{DType::Q4_0, 1.0 / 16}}) {
        SCOPED_TRACE(std::string(dtype_name(dt)));
        const auto q = Model::load(random_gguf(dt, 5), be);
        const auto got = decode(*q, be, false, 1, prompt).second;
        ASSERT_EQ(got.size(), exact.size());
        std::vector<double> want(exact.begin(), exact.end()), diff(got.size());
        for (size_t i = 0; i < got.size(); ++i) diff[i] = static_cast<double>(got[i]) - exact[i];
        EXPECT_LE(rms(diff) / rms(want), 4 * std::hypot(weight_err, activation_err));
    }
}

TEST(RandomGgufModel, TokenizerMetadataIsQwen3s) {
    const GgufFile g(random_gguf(DType::Q8_0, 5));
    EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(g.get_string("tokenizer.ggml.pre"), "qwen2");
    const auto tokens = g.get_string_array("tokenizer.ggml.tokens");
    const auto types = g.get_i32_array("tokenizer.ggml.token_type");
    ASSERT_EQ(tokens.size(), 151936u);  // the model's vocabulary, padded past the tokenizer's 151669
    ASSERT_EQ(types.size(), tokens.size());
    // What llama.cpp's converter writes for Qwen3 (facts from the published Qwen3 GGUF files).
    EXPECT_EQ(tokens[9707], "Hello");
    EXPECT_EQ(types[9707], 1);  // normal
    EXPECT_EQ(tokens[151645], "<|im_end|>");
    EXPECT_EQ(types[151645], 3);  // control
    EXPECT_EQ(types[151659], 3);  // <|fim_prefix|>: not special in tokenizer.json, but spelled like a control token
    EXPECT_EQ(tokens[151667], "<think>");
    EXPECT_EQ(types[151667], 4);  // user-defined: matched in text even without special-token parsing
    EXPECT_EQ(tokens[151700], "[PAD151700]");
    EXPECT_EQ(types[151700], 5);  // unused
    EXPECT_EQ(g.get_string_array("tokenizer.ggml.merges").size(), 151387u);
    EXPECT_EQ(g.get_string_array("tokenizer.ggml.merges")[0], "\u0120 \u0120");
    EXPECT_EQ(g.get_u32("tokenizer.ggml.bos_token_id"), 151643u);
    EXPECT_EQ(g.get_u32("tokenizer.ggml.eos_token_id"), 151645u);
    EXPECT_EQ(g.get_u32("tokenizer.ggml.padding_token_id"), 151643u);
    EXPECT_FALSE(g.get_bool("tokenizer.ggml.add_bos_token"));
    EXPECT_NE(g.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);

    // Tokenizes like the independent goldens of the tokenizer.json (which llama.cpp also reproduces from it).
    const Tokenizer tok = Tokenizer::from_gguf(g);
    std::ifstream in(testing::repo_path("testdata/tokenizer/qwen3_encode.jsonl"));
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line);
        EXPECT_EQ(tok.encode(j["text"].get<std::string>()), j["ids"].get<std::vector<int32_t>>()) << line;
        ++lines;
    }
    EXPECT_GT(lines, 100);
}

TEST(RandomGgufModel, OnlyQwen2PreTokenizersAndGgufTypesAreWritten) {
    testing::TempDir dir;
    std::ofstream(dir.file("tokenizer.json"))
        << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})";
    std::ofstream(dir.file("tokenizer_config.json")) << "{}";
    MakeCheckpointOptions o;
    o.format = CheckpointFormat::Gguf;
    o.out = dir.file("x.gguf");
    o.tokenizer_dir = dir.str();
    try {
        make_random_checkpoint(o);
        ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("pre-tokenizer is not Qwen2's"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(o.out));
    o.tokenizer_dir = testing::repo_path("models/qwen3-tokenizer");
    o.dtype = DType::Q4_1;
    EXPECT_THROW(make_random_checkpoint(o), std::runtime_error);
    o.format = CheckpointFormat::Safetensors;
    o.dtype = DType::Q8_0;
    o.out = dir.file("folder");
    EXPECT_THROW(make_random_checkpoint(o), std::runtime_error);
}

// llama.cpp's converter keeps Llama 3.1 scaling as per-pair divisors in the f32 vector rope_freqs.weight (no
// rope.scaling.type), and linear scaling as rope.scaling.type "linear" plus rope.scaling.factor.
TEST(GgufModels, ConvertedRopeScalingIsStoredAsLlamaCppStoresIt) {
    const std::string path = testing::temp_path("rope-scaling.gguf");
    const auto golden = [](const std::string& name) {
        std::ifstream f(testing::repo_path("testdata/models/" + name + "/goldens.json"));
        return nlohmann::json::parse(f);
    };
    {
        convert_to_gguf(testing::repo_path("testdata/models/tiny-llama3-rope"), path);
        const GgufFile g(path);
        EXPECT_EQ(g.find("llama.rope.scaling.type"), nullptr);
        const GgufTensor* t = g.find_tensor("rope_freqs.weight");
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(ggml_type_name(t->ggml_type), "F32");
        ASSERT_EQ(t->dims, std::vector<int64_t>{16});  // head_dim 32
        // Each factor is the plain frequency over the one transformers uses.
        const auto inv_freq = golden("tiny-llama3-rope")["inv_freq"].get<std::vector<double>>();
        std::vector<float> factors(16);
        std::memcpy(factors.data(), t->data, sizeof(float) * factors.size());
        for (size_t i = 0; i < factors.size(); ++i) {
            const double plain = std::pow(10000.0, -2.0 * static_cast<double>(i) / 32.0);
            EXPECT_NEAR(factors[i], plain / inv_freq[i], 1e-5 * factors[i]) << "pair " << i;
        }
    }
    {
        convert_to_gguf(testing::repo_path("testdata/models/tiny-llama-linear-rope"), path);
        const GgufFile g(path);
        EXPECT_EQ(g.get_string("llama.rope.scaling.type"), "linear");
        EXPECT_EQ(g.get_f32("llama.rope.scaling.factor"), 4.0f);
        EXPECT_EQ(g.find_tensor("rope_freqs.weight"), nullptr);
    }
    {
        convert_to_gguf(testing::repo_path("testdata/models/tiny-llama"), path);
        const GgufFile g(path);
        EXPECT_EQ(g.find("llama.rope.scaling.type"), nullptr);
        EXPECT_EQ(g.find("llama.rope.scaling.factor"), nullptr);
        EXPECT_EQ(g.find_tensor("rope_freqs.weight"), nullptr);
    }
    std::filesystem::remove(path);
}

// A llama GGUF with only what ModelConfig::from_gguf reads (head_dim 16, so 8 rope factors), plus what `extra`
// adds; returns the parsed configuration.
ModelConfig config_from_gguf(const std::function<void(GgufWriter&)>& extra) {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.block_count", 1);
    w.add_u32("llama.context_length", 128);
    w.add_u32("llama.embedding_length", 64);
    w.add_u32("llama.feed_forward_length", 128);
    w.add_u32("llama.attention.head_count", 4);
    w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_tensor("token_embd.weight", DType::F32, {64, 10}, std::vector<uint8_t>(64 * 10 * sizeof(float)));
    extra(w);
    const std::string path = testing::temp_path("rope-config.gguf");
    w.write(path);
    const GgufFile g(path);
    std::filesystem::remove(path);  // mapped: stays readable
    return ModelConfig::from_gguf(g);
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

void expect_config_error(const std::function<void(GgufWriter&)>& extra, const std::string& what) {
    try {
        config_from_gguf(extra);
        ADD_FAILURE() << "no error, expected one containing: " << what;
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
}

TEST(GgufModels, RopeFreqsTensorIsReadAndMalformedOnesAreRefused) {
    const std::vector<float> good = {1.0f, 1.0f, 1.5f, 3.25f, 8.0f, 8.0f, 8.0f, 8.0f};
    EXPECT_EQ(config_from_gguf([&](GgufWriter& w) { w.add_tensor("rope_freqs.weight", DType::F32, {8}, f32_bytes(good)); })
                  .rope_factors(),
              good);
    EXPECT_TRUE(config_from_gguf([](GgufWriter&) {}).rope_factors().empty());

    const std::string what = "tensor 'rope_freqs.weight' (per-pair RoPE frequency factors)";
    expect_config_error([&](GgufWriter& w) { w.add_tensor("rope_freqs.weight", DType::F16, {8}, std::vector<uint8_t>(16)); },
                        what + " has type F16, expected F32");
    expect_config_error(
        [&](GgufWriter& w) {
            w.add_tensor("rope_freqs.weight", DType::F32, {7}, f32_bytes(std::vector<float>(good.begin(), good.end() - 1)));
        },
        what + " must be a vector of head_dim/2 = 8 elements, got 7 in 1 dimension(s)");
    expect_config_error(
        [&](GgufWriter& w) { w.add_tensor("rope_freqs.weight", DType::F32, {16}, f32_bytes(std::vector<float>(16, 1.0f))); },
        what + " must be a vector of head_dim/2 = 8 elements, got 16 in 1 dimension(s)");
    expect_config_error([&](GgufWriter& w) { w.add_tensor("rope_freqs.weight", DType::F32, {8, 1}, f32_bytes(good)); },
                        what + " must be a vector of head_dim/2 = 8 elements, got 8 in 2 dimension(s)");
    for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), 0.0f, -2.0f}) {
        std::vector<float> v = good;
        v[5] = bad;
        expect_config_error([&](GgufWriter& w) { w.add_tensor("rope_freqs.weight", DType::F32, {8}, f32_bytes(v)); },
                            what + ": element 5 is ");
    }
}

// llama.cpp: rope.scaling.type defaults to linear, "none" never scales, rope.scaling.factor (older files:
// rope.scale_linear) divides every frequency and 0 stands for no scaling; other types are refused by name.
TEST(GgufModels, RopeScalingMetadataIsReadAsLlamaCppReadsItAndRangeChecked) {
    const auto linear = [](const std::function<void(GgufWriter&)>& extra) {
        return config_from_gguf(extra).rope_linear_factor;
    };
    EXPECT_EQ(linear([](GgufWriter& w) {
                  w.add_string("llama.rope.scaling.type", "linear");
                  w.add_f32("llama.rope.scaling.factor", 4.0f);
              }),
              4.0);
    EXPECT_EQ(linear([](GgufWriter& w) { w.add_f32("llama.rope.scaling.factor", 2.0f); }), 2.0);
    EXPECT_EQ(linear([](GgufWriter& w) { w.add_f32("llama.rope.scale_linear", 3.0f); }), 3.0);
    EXPECT_EQ(linear([](GgufWriter& w) { w.add_f32("llama.rope.scaling.factor", 0.0f); }), 1.0);
    EXPECT_EQ(linear([](GgufWriter& w) {
                  w.add_string("llama.rope.scaling.type", "none");
                  w.add_f32("llama.rope.scaling.factor", 4.0f);
              }),
              1.0);
    // Linear and per-pair factors combine.
    const ModelConfig both = config_from_gguf([](GgufWriter& w) {
        w.add_f32("llama.rope.scaling.factor", 2.0f);
        w.add_tensor("rope_freqs.weight", DType::F32, {8}, f32_bytes({1, 1, 1, 1, 3, 3, 3, 3}));
    });
    EXPECT_EQ(both.rope_factors(), (std::vector<float>{2, 2, 2, 2, 6, 6, 6, 6}));

    expect_config_error(
        [](GgufWriter& w) {
            w.add_string("llama.rope.scaling.type", "yarn");
            w.add_f32("llama.rope.scaling.factor", 4.0f);
        },
        "rope scaling 'yarn' is not supported");
    expect_config_error([](GgufWriter& w) { w.add_f32("llama.rope.scaling.factor", -4.0f); },
                        "metadata 'llama.rope.scaling.factor' must be in (0.001, 10000), got -4");
    // Absurd values (issue 15): too small, too large, not finite.
    for (const float bad : {1e-38f, 1e6f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
        expect_config_error([&](GgufWriter& w) { w.add_f32("llama.rope.scaling.factor", bad); },
                            "metadata 'llama.rope.scaling.factor' must be in (0.001, 10000), got ");
    }
    for (const float bad : {1e-30f, 0.5f, 1e13f, -std::numeric_limits<float>::infinity(), std::nanf("")}) {
        expect_config_error([&](GgufWriter& w) { w.add_f32("llama.rope.freq_base", bad); },
                            "metadata 'llama.rope.freq_base' must be in (1, 1e+12), got ");
    }
}

}  // namespace
}  // namespace tracelm
