// Safetensors model folders (single and sharded) and the deterministic random checkpoint writer.
#include <gtest/gtest.h>

#include "support/test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint/random_checkpoint.h"
#include "formats/safetensors_writer.h"
#include "model/config.h"
#include "checkpoint/rng.h"
#include "formats/safetensors.h"

namespace tracelm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::TempDir;

std::string read_all(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 13 + salt);
    return v;
}

// Stand-ins for the real tokenizer files, which the writer only copies.
fs::path fake_tokenizer(const TempDir& dir) {
    const fs::path tok = dir.path() / "tok";
    fs::create_directories(tok);
    write_all(tok / "tokenizer.json", "{\"model\": {}}\n");
    write_all(tok / "tokenizer_config.json", "{\"eos_token\": \"<|im_end|>\"}\n");
    return tok;
}

MakeCheckpointOptions tiny_options(const TempDir& dir, const std::string& out, uint64_t seed) {
    MakeCheckpointOptions o;
    o.geometry = "tiny";
    o.seed = seed;
    o.out = (dir.path() / out).string();
    o.tokenizer_dir = fake_tokenizer(dir).string();
    return o;
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
    try {
        f();
        ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& e) {
        for (const std::string& n : needles)
            EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "wanted '" << n << "' in: " << e.what();
    }
}

TEST(RandomNumbers, SplitMixAndFnvGiveKnownValuesAndDrawsStayInRange) {
    SplitMix64 sm(0);
    EXPECT_EQ(sm.next(), 0xe220a8397b1dcdafull);
    EXPECT_EQ(sm.next(), 0x6e789e6aa1b965f4ull);
    EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
    EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
    Xoshiro256 rng(1);
    for (int i = 0; i < 10000; ++i) {
        const float u = rng.uniform_pm1();
        ASSERT_GE(u, -1.0f);
        ASSERT_LT(u, 1.0f);
        ASSERT_LT(rng.below(10), 10u);
    }
}

TEST(Fnv1a64File, HashesFileBytes) {
    TempDir dir;
    write_all(dir.path() / "a", "foobar");
    EXPECT_EQ(fnv1a64_file(dir.str("a")), 0x85944171f73967e8ull);
    write_all(dir.path() / "e", "");
    EXPECT_EQ(fnv1a64_file(dir.str("e")), 0xcbf29ce484222325ull);
    std::string big(3u << 20, 'x');  // spans several read chunks
    big[2u << 20] = 'y';
    write_all(dir.path() / "b", big);
    EXPECT_EQ(fnv1a64_file(dir.str("b")), fnv1a64(big));
    expect_error([&] { fnv1a64_file(dir.str("missing")); }, {dir.str("missing")});
}

TEST(SafetensorsFolder, ReadsASingleFileAndNamesAMissingTensor) {
    TempDir dir;
    write_safetensors(dir.str("model.safetensors"),
                      {{"b", DType::F32, {2}, pattern(8, 1)}, {"a", DType::BF16, {3}, pattern(6, 2)}});
    SafetensorsFolder ck(dir.str());
    EXPECT_EQ(ck.dir(), dir.str());
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(ck.get("a").dtype, DType::BF16);
    EXPECT_EQ(std::memcmp(ck.get("b").data, pattern(8, 1).data(), 8), 0);
    EXPECT_EQ(ck.find("c"), nullptr);
    expect_error([&] { ck.get("c"); }, {"missing tensor 'c' in " + dir.str()});

    const TensorInfo* a = ck.find("a");
    SafetensorsFolder moved(std::move(ck));
    EXPECT_EQ(moved.find("a"), a);
    EXPECT_EQ(std::memcmp(moved.get("b").data, pattern(8, 1).data(), 8), 0);
}

TEST(SafetensorsFolder, ReadsShardsThroughTheirIndexAndRefusesBadIndexes) {
    TempDir dir;
    write_safetensors(dir.str("s1.safetensors"), {{"x", DType::I32, {2}, pattern(8, 1)}, {"y", DType::I32, {1}, pattern(4, 2)}});
    write_safetensors(dir.str("s2.safetensors"), {{"z", DType::I64, {1}, pattern(8, 3)}});
    const fs::path index = dir.path() / "model.safetensors.index.json";
    write_all(index, R"({"metadata": {"total_size": 20}, "weight_map": {"x": "s1.safetensors", "y": "s1.safetensors", "z": "s2.safetensors"}})");
    {
        SafetensorsFolder ck(dir.str());
        EXPECT_EQ(ck.names(), (std::vector<std::string>{"x", "y", "z"}));
        EXPECT_EQ(ck.files().size(), 2u);
        EXPECT_EQ(std::memcmp(ck.get("z").data, pattern(8, 3).data(), 8), 0);
    }

    auto expect_bad_index = [&](const std::string& text, const std::vector<std::string>& needles) {
        SCOPED_TRACE(text);
        write_all(index, text);
        std::vector<std::string> all = needles;
        all.push_back(index.string());
        expect_error([&] { SafetensorsFolder ck(dir.str()); }, all);
    };
    expect_bad_index(R"({"weight_map": {"x": "s1.safetensors", "z": "gone.safetensors"}})", {"gone.safetensors", "cannot open"});
    expect_bad_index(R"({"weight_map": {"x": "../s1.safetensors"}})", {"'../s1.safetensors'"});
    expect_bad_index(R"({"weight_map": {"x": ".."}})", {"'..'"});
    expect_bad_index(R"({"weight_map": {"x": "/etc/passwd"}})", {"'/etc/passwd'"});
    expect_bad_index(R"({"weight_map": {"x": "sub/s1.safetensors"}})", {"sub/s1.safetensors"});
    expect_bad_index(R"({"weight_map": {"x": ""}})", {"''"});
    expect_bad_index(R"({"weight_map": {"x": 3}})", {"'x' is not a string"});
    expect_bad_index(R"({"weight_map": {"z": "s1.safetensors"}})", {"tensor 'z'", "s1.safetensors", "does not contain it"});
    expect_bad_index(R"({"weight_map": {}})", {"empty"});
    expect_bad_index(R"({"metadata": {}})", {"weight_map"});
    expect_bad_index(R"([1])", {"weight_map"});
    expect_bad_index(R"({"weight_map": )", {"invalid JSON"});
    write_all(dir.path() / "s3.safetensors", "garbage!garbage!");
    expect_bad_index(R"({"weight_map": {"x": "s3.safetensors"}})", {"s3.safetensors", "header length"});
}

TEST(SafetensorsFolder, AFolderWithoutACheckpointIsRefusedNamingThePath) {
    TempDir dir;
    expect_error([&] { SafetensorsFolder ck(dir.str()); }, {dir.str(), "neither model.safetensors nor"});
    expect_error([&] { SafetensorsFolder ck(dir.str("nope")); }, {dir.str("nope"), "not a directory"});
    write_all(dir.path() / "model.safetensors", "short");
    expect_error([&] { SafetensorsFolder ck(dir.str()); }, {dir.str("model.safetensors"), "too short"});
}

// Every tensor a Qwen3 model with tied embeddings has, with HF's names and [out, in] shapes.
std::map<std::string, std::vector<int64_t>> expected_tiny_tensors() {
    const int64_t H = 64, I = 192, q = 4 * 32, kv = 2 * 32, hd = 32;
    std::map<std::string, std::vector<int64_t>> m{{"model.embed_tokens.weight", {151936, H}}, {"model.norm.weight", {H}}};
    for (int l = 0; l < 2; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        m[p + "input_layernorm.weight"] = {H};
        m[p + "post_attention_layernorm.weight"] = {H};
        m[p + "self_attn.q_proj.weight"] = {q, H};
        m[p + "self_attn.k_proj.weight"] = {kv, H};
        m[p + "self_attn.v_proj.weight"] = {kv, H};
        m[p + "self_attn.o_proj.weight"] = {H, q};
        m[p + "self_attn.q_norm.weight"] = {hd};
        m[p + "self_attn.k_norm.weight"] = {hd};
        m[p + "mlp.gate_proj.weight"] = {I, H};
        m[p + "mlp.up_proj.weight"] = {I, H};
        m[p + "mlp.down_proj.weight"] = {H, I};
    }
    return m;
}

std::vector<float> as_f32(const TensorInfo& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
        if (t.dtype == DType::F32) {
            std::memcpy(&v[i], static_cast<const char*>(t.data) + 4 * i, 4);
        } else {
            uint16_t b;
            std::memcpy(&b, static_cast<const char*>(t.data) + 2 * i, 2);
            v[i] = bf16_to_f32(b);
        }
    }
    return v;
}

TEST(RandomCheckpoint, TinyHasHfLayoutConfigAndSaneValues) {
    TempDir dir;
    const MakeCheckpointOptions o = tiny_options(dir, "ck", 1);
    make_random_checkpoint(o);
    const fs::path out(o.out);
    EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
    EXPECT_EQ(read_all(out / "tokenizer.json"), read_all(fs::path(o.tokenizer_dir) / "tokenizer.json"));
    EXPECT_EQ(read_all(out / "tokenizer_config.json"), read_all(fs::path(o.tokenizer_dir) / "tokenizer_config.json"));

    const ModelConfig c = ModelConfig::from_file((out / "config.json").string());
    EXPECT_EQ(c.arch, Arch::Qwen3);
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.intermediate_size, 192);
    EXPECT_EQ(c.num_hidden_layers, 2);
    EXPECT_EQ(c.num_attention_heads, 4);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.vocab_size, 151936);
    EXPECT_EQ(c.max_position_embeddings, 4096);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
    EXPECT_EQ(c.bos_token_id, 151643);
    EXPECT_EQ(c.eos_token_ids, std::vector<int>{151645});
    EXPECT_EQ(c.torch_dtype, "float32");
    const json raw = json::parse(read_all(out / "config.json"));
    EXPECT_EQ(raw.at("model_type"), "qwen3");
    EXPECT_EQ(raw.at("hidden_act"), "silu");
    EXPECT_TRUE(raw.at("rope_scaling").is_null());
    EXPECT_TRUE(raw.at("sliding_window").is_null());
    EXPECT_EQ(raw.at("use_sliding_window"), false);
    EXPECT_EQ(raw.at("max_window_layers"), 2);
    EXPECT_EQ(raw.at("use_cache"), true);

    const SafetensorsFolder ck(o.out);
    const auto expected = expected_tiny_tensors();
    std::vector<std::string> names;
    for (const auto& kv : expected) names.push_back(kv.first);
    EXPECT_EQ(ck.names(), names);
    EXPECT_EQ(ck.files().front().metadata().at("format"), "pt");
    for (const auto& [name, shape] : expected) {
        const TensorInfo& t = ck.get(name);
        EXPECT_EQ(t.shape, shape) << name;
        EXPECT_EQ(t.dtype, DType::F32) << name;
        const std::vector<float> v = as_f32(t);
        double sum = 0, sq = 0;
        float lo = v[0], hi = v[0];
        for (float x : v) {
            sum += x;
            sq += static_cast<double>(x) * x;
            lo = std::min(lo, x);
            hi = std::max(hi, x);
        }
        const double mean = sum / static_cast<double>(v.size()), var = sq / static_cast<double>(v.size()) - mean * mean;
        if (shape.size() == 1) {  // norm weights: 1 + U(+-0.1)
            EXPECT_GE(lo, 0.9f) << name;
            EXPECT_LE(hi, 1.1f) << name;
            EXPECT_NEAR(mean, 1.0, 0.03) << name;
            EXPECT_GT(hi - lo, 0.1f) << name;
        } else {  // U(+-sqrt(3 / fan_in)): variance 1 / fan_in; the embedding is U(+-1)
            const double fan_in = name == "model.embed_tokens.weight" ? 3.0 : static_cast<double>(shape[1]);
            const double bound = std::sqrt(3.0 / fan_in);
            EXPECT_GE(lo, -bound) << name;
            EXPECT_LT(hi, bound) << name;
            EXPECT_NEAR(mean, 0.0, 0.05 * bound) << name;
            EXPECT_NEAR(var * fan_in, 1.0, 0.05) << name;
        }
    }
    // Different tensors of the same shape get different values.
    EXPECT_NE(std::memcmp(ck.get("model.layers.0.mlp.gate_proj.weight").data, ck.get("model.layers.0.mlp.up_proj.weight").data,
                          ck.get("model.layers.0.mlp.up_proj.weight").bytes),
              0);
}

TEST(RandomCheckpoint, DeterministicPerSeed) {
    TempDir dir;
    make_random_checkpoint(tiny_options(dir, "a", 5));
    make_random_checkpoint(tiny_options(dir, "b", 5));
    make_random_checkpoint(tiny_options(dir, "c", 6));
    for (const char* f : {"model.safetensors", "config.json"})
        EXPECT_EQ(read_all(dir.path() / "a" / f), read_all(dir.path() / "b" / f)) << f;
    EXPECT_EQ(fnv1a64_file(dir.str("a/model.safetensors")), fnv1a64_file(dir.str("b/model.safetensors")));
    EXPECT_NE(fnv1a64_file(dir.str("a/model.safetensors")), fnv1a64_file(dir.str("c/model.safetensors")));
    const SafetensorsFolder a(dir.str("a")), c(dir.str("c"));
    for (const std::string& name : a.names())
        EXPECT_NE(std::memcmp(a.get(name).data, c.get(name).data, a.get(name).bytes), 0) << name;
}

// A change detector, not a correctness test: it pins the generator's own output, because the goldens made by
// other software from these checkpoints are only valid for these bytes. If you change the generator on purpose,
// regenerate the goldens and update these hashes together.
TEST(RandomCheckpoint, GivesTheBytesTheGoldensWereMadeFrom) {
    TempDir dir;
    MakeCheckpointOptions o = tiny_options(dir, "f32", 0);
    make_random_checkpoint(o);
    EXPECT_EQ(fnv1a64_file(o.out + "/model.safetensors"), 0x0ec38c845c575e48ull);
    o.out = dir.str("bf16");
    o.dtype = DType::BF16;
    make_random_checkpoint(o);
    EXPECT_EQ(fnv1a64_file(o.out + "/model.safetensors"), 0xff0f64787c88eba1ull);
}

TEST(RandomCheckpoint, Bf16IsTheRoundedF32) {
    TempDir dir;
    MakeCheckpointOptions o = tiny_options(dir, "f32", 9);
    make_random_checkpoint(o);
    o.out = dir.str("bf16");
    o.dtype = DType::BF16;
    make_random_checkpoint(o);
    const SafetensorsFolder f(dir.str("f32")), b(dir.str("bf16"));
    EXPECT_EQ(ModelConfig::from_file(dir.str("bf16/config.json")).torch_dtype, "bfloat16");
    for (const std::string& name : f.names()) {
        const TensorInfo& tf = f.get(name);
        const TensorInfo& tb = b.get(name);
        ASSERT_EQ(tb.dtype, DType::BF16);
        ASSERT_EQ(tb.shape, tf.shape);
        for (int64_t i = 0; i < tf.numel(); ++i) {
            float x;
            uint16_t y;
            std::memcpy(&x, static_cast<const char*>(tf.data) + 4 * i, 4);
            std::memcpy(&y, static_cast<const char*>(tb.data) + 2 * i, 2);
            ASSERT_EQ(f32_to_bf16(x), y) << name << "[" << i << "]";
        }
    }
}

TEST(RandomCheckpoint, ShardsLikeHfWithTheSameTensors) {
    TempDir dir;
    MakeCheckpointOptions o = tiny_options(dir, "whole", 3);
    make_random_checkpoint(o);
    o.out = dir.str("sharded");
    o.max_shard_bytes = 100000;
    make_random_checkpoint(o);

    const fs::path out(o.out);
    EXPECT_FALSE(fs::exists(out / "model.safetensors"));
    const json index = json::parse(read_all(out / "model.safetensors.index.json"));
    // The embedding (over the limit) is emitted alone first, then the layers fill shards in order.
    const json& wm = index.at("weight_map");
    EXPECT_EQ(wm.at("model.embed_tokens.weight"), "model-00001-of-00006.safetensors");
    EXPECT_EQ(wm.at("model.layers.0.self_attn.q_proj.weight"), "model-00002-of-00006.safetensors");
    EXPECT_EQ(wm.at("model.norm.weight"), "model-00006-of-00006.safetensors");
    uint64_t total = 0;
    std::map<std::string, uint64_t> shard_bytes;
    const SafetensorsFolder whole(dir.str("whole")), sharded(o.out);
    for (const auto& [name, file] : wm.items()) {
        shard_bytes[file.get<std::string>()] += sharded.get(name).bytes;
        total += sharded.get(name).bytes;
    }
    EXPECT_EQ(shard_bytes.size(), 6u);
    for (const auto& [file, bytes] : shard_bytes) {
        EXPECT_TRUE(fs::exists(out / file)) << file;
        if (file != "model-00001-of-00006.safetensors") {
            EXPECT_LE(bytes, o.max_shard_bytes) << file;
        }
    }
    EXPECT_EQ(index.at("metadata").at("total_size"), total);
    EXPECT_EQ(read_all(out / "model.safetensors.index.json"), index.dump(2) + "\n");

    ASSERT_EQ(sharded.names(), whole.names());
    EXPECT_EQ(sharded.files().size(), 6u);
    for (const std::string& name : whole.names()) {
        const TensorInfo& a = whole.get(name);
        const TensorInfo& b = sharded.get(name);
        ASSERT_EQ(a.shape, b.shape) << name;
        ASSERT_EQ(a.bytes, b.bytes) << name;
        EXPECT_EQ(std::memcmp(a.data, b.data, a.bytes), 0) << name;
    }
}

TEST(RandomCheckpoint, RewritingAFolderReplacesOldWeights) {
    TempDir dir;
    MakeCheckpointOptions o = tiny_options(dir, "ck", 3);
    o.max_shard_bytes = 100000;
    make_random_checkpoint(o);
    write_all(fs::path(o.out) / "notes.txt", "keep me");
    o.max_shard_bytes = 0;
    make_random_checkpoint(o);
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(o.out)) files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    EXPECT_EQ(files, (std::vector<std::string>{"config.json", "model.safetensors", "notes.txt", "tokenizer.json",
                                               "tokenizer_config.json"}));
}

TEST(RandomCheckpoint, BadOptionsAreRefusedBeforeWritingAnything) {
    TempDir dir;
    MakeCheckpointOptions o = tiny_options(dir, "x", 1);
    o.geometry = "huge";
    expect_error([&] { make_random_checkpoint(o); }, {"unknown checkpoint geometry 'huge'", "tiny, qwen3-0.6b"});
    o.geometry = "tiny";
    o.dtype = DType::I32;
    expect_error([&] { make_random_checkpoint(o); }, {"i32"});
    o.dtype = DType::F32;
    o.tokenizer_dir = dir.str("no_tokenizer");
    expect_error([&] { make_random_checkpoint(o); }, {dir.str("no_tokenizer") + "/tokenizer.json"});
    EXPECT_FALSE(fs::exists(o.out));
    EXPECT_TRUE(MakeCheckpointOptions{}.tokenizer_dir.empty());  // default_tokenizer_dir(), looked up when used
}

// The build tree holds a copy of the data files next to the binaries (share/tracelm), as an installation does, so
// nothing depends on where the sources are; TRACELM_DATA_DIR overrides it, and a missing file names where it looked.
TEST(DataDir, TheTokenizerIsFoundNextToTheExecutable) {
    const fs::path tok = default_tokenizer_dir();
    EXPECT_EQ(tok.parent_path().filename(), "tracelm");
    EXPECT_EQ(read_all(tok / "tokenizer.json"), read_all(testing::repo_path("models/qwen3-tokenizer/tokenizer.json")));
    const TempDir dir;
    ASSERT_EQ(setenv("TRACELM_DATA_DIR", dir.str().c_str(), 1), 0);
    expect_error([] { default_tokenizer_dir(); }, {"'qwen3-tokenizer' not found", dir.str("qwen3-tokenizer")});
    fs::create_directories(dir.path() / "qwen3-tokenizer");
    EXPECT_EQ(default_tokenizer_dir(), dir.str("qwen3-tokenizer"));
    unsetenv("TRACELM_DATA_DIR");
}

TEST(WriteSafetensors, RejectsBadInput) {
    TempDir dir;
    const std::string path = dir.str("w.safetensors");
    expect_error([&] { write_safetensors(path, {{"a", DType::F32, {3}, pattern(8, 0)}}); }, {path, "'a'", "needs 12"});
    expect_error([&] { write_safetensors(path, {{"a", DType::F32, {-1}, {}}}); }, {path, "invalid shape"});
    expect_error([&] { write_safetensors(path, {{"a", DType::F32, {1ll << 62, 8}, {}}}); }, {path, "invalid shape"});
    expect_error([&] { write_safetensors(path, {{"a", DType::I32, {1}, pattern(4, 0)}, {"a", DType::I32, {1}, pattern(4, 0)}}); },
                 {path, "duplicate tensor 'a'"});
    expect_error([&] { write_safetensors(path, {{"__metadata__", DType::I32, {1}, pattern(4, 0)}}); }, {path, "invalid tensor name"});
    expect_error([&] { write_safetensors(dir.str("no/such/dir/w.safetensors"), {}); }, {"no/such/dir"});
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
}

}  // namespace
}  // namespace tracelm
