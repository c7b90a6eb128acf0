// The `tracelm` executable as users and outside checks drive it: bad inputs give a clear message
// and a non-zero exit, good ones the documented output.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "backends/cpu/kernels/cpu_features.h"
#include "backends/registry.h"
#include "support/http_client.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

namespace fs = std::filesystem;

using Result = testing::CliResult;

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

Result run(const std::string& args, bool with_stderr = true) { return testing::run_tracelm(args, with_stderr); }

// A copy of the tiny checkpoint that a test may damage.
class CliModel : public ::testing::Test {
   protected:
    fs::path dir;
    void SetUp() override {
        dir = fs::temp_directory_path() /
              ("tracelm-cli-" + std::to_string(getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir);
        fs::copy(testing::generated_checkpoint("tiny", 3, DType::F32), dir);
    }
    void TearDown() override { fs::remove_all(dir); }
    std::string model() const { return "--model " + quote(dir.string()); }
    void write(const std::string& name, const std::string& text) { std::ofstream(dir / name, std::ios::binary) << text; }
    std::string read(const std::string& name) {
        std::ifstream f(dir / name, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    }
};

TEST_F(CliModel, GenerateJsonReportsReplayedDecode) {
    const Result r = run("generate " + model() + " --prompt 'Hello there' --max-tokens 12 --json", false);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt_tokens"], 2);
    EXPECT_EQ(j["tokens"].size(), 12u);
    EXPECT_TRUE(j["text"].is_string());
    EXPECT_GT(j["prefill_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
    EXPECT_EQ(j["capture"], true);
    EXPECT_EQ(j["replays"], 10);  // 11 decode steps: one eager warm-up, then replays

    const Result eager = run("generate " + model() + " --prompt 'Hello there' --max-tokens 12 --json --capture off", false);
    ASSERT_EQ(eager.code, 0) << eager.out;
    const auto je = nlohmann::json::parse(eager.out);
    EXPECT_EQ(je["capture"], false);
    EXPECT_EQ(je["replays"], 0);
    EXPECT_EQ(je["tokens"], j["tokens"]);
}

// The bench's report, not its speed (numbers are for the bench itself, never asserted in tests).
TEST_F(CliModel, BenchReportsEveryRoundAndTheirMedians) {
    const Result r = run("bench " + model() + " --prompt-tokens 4 --gen-tokens 8 --rounds 3 --threads 2 --json", false);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens_match"], true);
    ASSERT_EQ(j["per_round"].size(), 3u);
    std::vector<double> shares;
    for (const auto& pr : j["per_round"]) {
        EXPECT_GT(pr["decode_replay_tokens_per_s"].get<double>(), 0);
        EXPECT_GT(pr["read_bandwidth_gb_s"].get<double>(), 0);
        shares.push_back(pr["decode_bandwidth_share"].get<double>());
    }
    std::sort(shares.begin(), shares.end());
    EXPECT_DOUBLE_EQ(j["decode_bandwidth_share"].get<double>(), shares[1]);
    EXPECT_GT(j["decode_bytes_per_step"].get<double>(), 0);
    EXPECT_EQ(j["batch"], 1);

    // --batch: several sequences in one decode graph, replayed tokens equal to eager ones; a step reads the weights
    // once and each sequence's own K and V.
    const Result b = run("bench " + model() + " --prompt-tokens 4 --gen-tokens 8 --rounds 1 --threads 2 --batch 3 --json", false);
    ASSERT_EQ(b.code, 0) << b.out;
    const auto jb = nlohmann::json::parse(b.out);
    EXPECT_EQ(jb["batch"], 3);
    EXPECT_EQ(jb["tokens_match"], true);
    EXPECT_GT(jb["decode_bytes_per_step"].get<double>(), j["decode_bytes_per_step"].get<double>());
}

// --synthetic-context: one row per context (and, with DeepSeek's indexer, per attention mode), the parts of an
// eager step within it; numbers are the bench's, only their shape is asserted.
TEST_F(CliModel, BenchSyntheticContextReportsEachContextAndWhereTheStepGoes) {
    const std::string deepseek = quote(testing::repo_path("testdata/models/tiny-deepseek-v32"));
    const Result r = run("bench --model " + deepseek + " --synthetic-context 16,40 --gen-tokens 8 --threads 2 --json",
                         false);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["rows"].size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
        const auto& row = j["rows"][i];
        EXPECT_EQ(row["context"], i < 2 ? 16 : 40);
        EXPECT_EQ(row["attention"], i % 2 == 0 ? "sparse" : "dense");
        EXPECT_GT(row["decode_replay_tokens_per_s"].get<double>(), 0);
        EXPECT_GT(row["eager_attention_ms"].get<double>(), 0);
        EXPECT_GT(row["eager_indexer_ms"].get<double>(), 0);  // dense attention still caches the indexer's keys
        EXPECT_LT(row["eager_attention_share"].get<double>() + row["eager_indexer_share"].get<double>(), 1.0);
    }
    EXPECT_EQ(j["sparse_vs_dense"].size(), 2u);

    const Result dense = run("bench " + model() + " --synthetic-context 24 --gen-tokens 8 --threads 2 --json", false);
    ASSERT_EQ(dense.code, 0) << dense.out;
    const auto jd = nlohmann::json::parse(dense.out);
    ASSERT_EQ(jd["rows"].size(), 1u);
    EXPECT_GT(jd["rows"][0]["eager_attention_ms"].get<double>(), 0);
    EXPECT_EQ(jd["rows"][0]["eager_indexer_ms"].get<double>(), 0);
    EXPECT_FALSE(jd.contains("sparse_vs_dense"));

    const Result beyond = run("bench " + model() + " --synthetic-context 5000000");
    EXPECT_NE(beyond.code, 0);
}

TEST_F(CliModel, PromptLongerThanContextIsRefused) {
    const Result r = run("generate " + model() + " --prompt 'one two three four five six seven eight' --context 4");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("exceeds the context"), std::string::npos) << r.out;
}

TEST_F(CliModel, MaxTokensBeyondKvCapacityIsRefused) {
    const Result r = run("generate " + model() + " --prompt 'Hi' --context 64 --max-tokens 100");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("exceeds the context of 64 tokens"), std::string::npos) << r.out;
}

TEST_F(CliModel, TruncatedSafetensorsIsRefused) {
    const std::string full = read("model.safetensors");
    for (size_t cut : {size_t{0}, size_t{5}, size_t{8}, size_t{100}, full.size() / 2, full.size() - 1}) {
        write("model.safetensors", full.substr(0, cut));
        const Result r = run("generate " + model() + " --prompt Hi --max-tokens 2");
        EXPECT_EQ(r.code, 1) << "cut at " << cut << ": " << r.out;
        EXPECT_NE(r.out.find("model.safetensors"), std::string::npos) << r.out;
    }
}

TEST_F(CliModel, CorruptConfigIsRefused) {
    write("config.json", "{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": ");
    Result r = run("generate " + model() + " --prompt Hi");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.out.find("config.json"), std::string::npos) << r.out;

    fs::copy_file(testing::generated_checkpoint("tiny", 3, DType::F32) + "/config.json", dir / "config.json",
                  fs::copy_options::overwrite_existing);
    auto j = nlohmann::json::parse(read("config.json"));
    j["architectures"] = {"GPTBigCodeForCausalLM"};
    write("config.json", j.dump());
    r = run("generate " + model() + " --prompt Hi");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.out.find("unsupported architecture 'GPTBigCodeForCausalLM'"), std::string::npos) << r.out;
}

TEST(Cli, TokenizeJsonlMatchesTheIndependentGoldens) {
    const std::string dir = testing::generated_checkpoint("tiny", 3, DType::F32);
    const std::string data = testing::repo_path("testdata/tokenizer/qwen3_encode.jsonl");
    const Result r = run("tokenize --model " + quote(dir) + " --jsonl " + quote(data), false);
    ASSERT_EQ(r.code, 0);
    std::ifstream want(data);
    std::istringstream got(r.out);
    std::string wl, gl;
    int lines = 0;
    while (std::getline(want, wl)) {
        ASSERT_TRUE(std::getline(got, gl));
        EXPECT_EQ(nlohmann::json::parse(gl), nlohmann::json::parse(wl)["ids"]) << wl;
        ++lines;
    }
    EXPECT_GT(lines, 100);
    const Result one = run("tokenize --model " + quote(dir) + " --text 'Hello, world!'", false);
    EXPECT_EQ(nlohmann::json::parse(one.out), nlohmann::json::parse("[9707,11,1879,0]"));
}

// A GGUF file from make-checkpoint --format gguf carries its tokenizer; the bench on it says in one line why
// llama.cpp did not run (here: no such python) and reports everything else.
TEST(Cli, BenchOnAGgufFileGoesOnWithoutLlamaCpp) {
    testing::TempDir dir;
    const std::string gguf = dir.file("tiny-q8_0.gguf");
    Result r = run("make-checkpoint --geometry tiny --seed 2 --format gguf --dtype q8_0 --out " + quote(gguf));
    ASSERT_EQ(r.code, 0) << r.out;
    r = run("tokenize --model " + quote(gguf) + " --text 'Hello, world!'", false);
    EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json::parse("[9707,11,1879,0]"));
    const std::string bench = "bench --model " + quote(gguf) + " --prompt-tokens 8 --gen-tokens 8 --llamacpp-python /nonexistent/python";
    r = run(bench);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("llama.cpp comparison: skipped (/nonexistent/python: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("decode_replay_tokens_per_s"), std::string::npos) << r.out;
    r = run(bench + " --json", false);  // stdout is the JSON alone; the reason is in it
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_NE(j.value("llamacpp_skipped", "").find("/nonexistent/python"), std::string::npos) << r.out;
    EXPECT_FALSE(j.contains("llamacpp_decode_tokens_per_s"));
    EXPECT_GT(j["decode_replay_tokens_per_s"].get<double>(), 0.0);
}

// With TRACELM_LLAMACPP_PYTHON naming a python that has llama_cpp (llama-cpp-python), the bench runs llama.cpp
// on the same file and prompt: its speeds and the ratio are reported, and on the f32 model at least the first half
// of its greedy tokens agree with tracelm's (the README's claim: f32 matmuls sum in other orders than ggml's, so a
// near-tie of the random model may part them later).
TEST(Cli, BenchRunsLlamaCppOnTheSameFile) {
    const char* python = std::getenv("TRACELM_LLAMACPP_PYTHON");
    if (python == nullptr) GTEST_SKIP() << "TRACELM_LLAMACPP_PYTHON is not set";
    testing::TempDir dir;
    const std::string gguf = dir.file("tiny-f32.gguf");
    ASSERT_EQ(run("make-checkpoint --geometry tiny --seed 2 --format gguf --out " + quote(gguf)).code, 0);
    const Result r = run("bench --json --model " + quote(gguf) + " --prompt-tokens 16 --gen-tokens 24 --rounds 3 --llamacpp-python " +
                         quote(python), false);
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_FALSE(j.contains("llamacpp_skipped")) << j["llamacpp_skipped"];
    EXPECT_GT(j["llamacpp_prefill_tokens_per_s"].get<double>(), 0.0);
    EXPECT_GT(j["llamacpp_decode_tokens_per_s"].get<double>(), 0.0);
    // Each round's ratio is taken within the round; the reported one is their median.
    std::vector<double> ratios;
    for (const auto& round : j["per_round"]) {
        EXPECT_DOUBLE_EQ(round["replay_over_llamacpp_decode"].get<double>(),
                         round["decode_replay_tokens_per_s"].get<double>() / round["llamacpp_decode_tokens_per_s"].get<double>());
        ratios.push_back(round["replay_over_llamacpp_decode"].get<double>());
    }
    ASSERT_EQ(ratios.size(), 3u);
    std::sort(ratios.begin(), ratios.end());
    EXPECT_DOUBLE_EQ(j["replay_over_llamacpp_decode"].get<double>(), ratios[1]);
    EXPECT_GE(j["llamacpp_same_leading_tokens"].get<int>(), 12);
}

// --kv-type picks the KV cache values; a GGUF model defaults to f16 (llama.cpp's default), and the model summary
// line gives the true size: f32 takes twice the bytes.
TEST(Cli, KvTypeOptionChoosesTheCacheDtype) {
    testing::TempDir dir;
    const std::string gguf = dir.file("tiny-q8_0.gguf");
    ASSERT_EQ(run("make-checkpoint --geometry tiny --seed 2 --format gguf --dtype q8_0 --out " + quote(gguf)).code, 0);
    const auto kv_cache = [&](const std::string& extra) {
        const Result r = run("generate --model " + quote(gguf) + " --prompt Hi --max-tokens 3" + extra);
        EXPECT_EQ(r.code, 0) << r.out;
        const size_t at = r.out.find("KV cache ");
        EXPECT_NE(at, std::string::npos) << r.out;
        std::istringstream line(r.out.substr(at + 9));
        double mib = 0;
        std::string unit, type;
        line >> mib >> unit >> type;
        EXPECT_EQ(unit, "MiB");
        return std::make_pair(mib, type);
    };
    const auto by_default = kv_cache(""), f16 = kv_cache(" --kv-type f16"), f32 = kv_cache(" --kv-type f32");
    EXPECT_EQ(by_default.second, "f16");
    EXPECT_EQ(f16, by_default);
    EXPECT_EQ(f32.second, "f32");
    EXPECT_GT(f16.first, 0.0);
    EXPECT_NEAR(f32.first, 2 * f16.first, 0.1);  // the sizes are printed to 0.1 MiB
    const Result bad = run("generate --model " + quote(gguf) + " --prompt Hi --kv-type bf16");
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.out.find("--kv-type"), std::string::npos) << bad.out;
}

// --numerics fast repacks the matmul weights at load (the summary names the repacked type; the embedding stays
// as stored) and generates; an unknown value is refused naming the option.
TEST(Cli, NumericsFastRepacksTheMatmulWeights) {
    testing::TempDir dir;
    const std::string gguf = dir.file("tiny-q4_0.gguf");
    ASSERT_EQ(run("make-checkpoint --geometry tiny --seed 2 --format gguf --dtype q4_0 --out " + quote(gguf)).code, 0);
    const Result fast = run("generate --model " + quote(gguf) + " --prompt Hi --max-tokens 4 --numerics fast");
    ASSERT_EQ(fast.code, 0) << fast.out;
    EXPECT_NE(fast.out.find("q4_0_r16 x"), std::string::npos) << fast.out;
    EXPECT_EQ(run("generate --model " + quote(gguf) + " --prompt Hi --max-tokens 4").out.find("_r16"), std::string::npos);
    const Result bad = run("generate --model " + quote(gguf) + " --prompt Hi --numerics exact");
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.out.find("--numerics"), std::string::npos) << bad.out;
}

// `serve` defaults to the fast numerics on the CPU (it is there for throughput) where its SIMD kernels run, not with
// the portable kernels alone (there the fast order's products are a slow reference); --numerics ggml still serves
// llama.cpp's order. The server is started on a free loopback port, read until ready, and stopped by SIGINT.
TEST(Cli, ServeDefaultsToTheFastNumerics) {
    testing::TempDir dir;
    const std::string gguf = dir.file("tiny-q4_0.gguf");
    ASSERT_EQ(run("make-checkpoint --geometry tiny --seed 2 --format gguf --dtype q4_0 --out " + quote(gguf)).code, 0);
    const auto serve = [&](const std::string& extra, const std::string& env = "") {
        const std::string log = dir.file("serve.log");
        return testing::run_command(env + std::string(TRACELM_BINARY) + " serve --model " + quote(gguf) +
                                    " --port 0 --context 64 --max-seqs 2 " + extra + " >" + quote(log) +
                                    " 2>&1 & pid=$!; for i in $(seq 600); do grep -q '^ready' " + quote(log) +
                                    " && break; sleep 0.1; done; kill -INT $pid; wait $pid; code=$?; cat " +
                                    quote(log) + "; exit $code");  // the server's exit status, not cat's
    };
    // The ready line names the weight types the load made: the tiny checkpoint's 15 q4_0 matrices (its 9 norms stay
    // f32), each repacked by the fast numerics.
    const Result dflt = serve("");
    EXPECT_EQ(dflt.code, 0) << dflt.out;
    const bool simd = cpu::active_isa() != cpu::Isa::Portable;  // the child reads the same machine and TRACELM_ISA
    EXPECT_NE(dflt.out.find(simd ? "ready: tiny-q4_0 (numerics fast, weights f32 x9, q4_0_r16 x15, KV cache f16, "
                                 : "ready: tiny-q4_0 (numerics ggml, weights f32 x9, q4_0 x15, KV cache f16, "),
              std::string::npos)
        << dflt.out;
    // The checkpoint carries the vendored Qwen3 tokenizer and template, which asks for <tool_call> blocks.
    EXPECT_NE(dflt.out.find(", tool calls hermes)"), std::string::npos) << dflt.out;
    const Result ggml = serve("--numerics ggml --kv-type f32");
    EXPECT_EQ(ggml.code, 0) << ggml.out;
    EXPECT_NE(ggml.out.find("ready: tiny-q4_0 (numerics ggml, weights f32 x9, q4_0 x15, KV cache f32, "),
              std::string::npos)
        << ggml.out;
    const Result portable = serve("", "TRACELM_ISA=portable ");
    EXPECT_EQ(portable.code, 0) << portable.out;
    EXPECT_NE(portable.out.find("ready: tiny-q4_0 (numerics ggml,"), std::string::npos) << portable.out;
}

// Every command that loads a model takes the same model flags, defined once (cli/model_flags.h); bench sizes its
// own context.
TEST(Cli, EveryCommandThatLoadsAModelTakesTheModelFlags) {
    for (const std::string cmd : {"generate", "chat", "serve", "bench"}) {
        const Result r = run(cmd + " --help");
        EXPECT_EQ(r.code, 0) << r.out;
        for (const std::string flag :
             {"--model", "--backend", "--threads", "--context", "--kv-type", "--numerics", "--no-prefix-cache"}) {
            if (cmd == "bench" && flag == "--context") continue;
            EXPECT_NE(r.out.find(flag), std::string::npos) << cmd << " lacks " << flag;
        }
    }
}

TEST_F(CliModel, SafetensorsCheckpointsDefaultToAnF32KvCache) {
    const Result r = run("generate " + model() + " --prompt Hi --max-tokens 2 --context 64");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(" MiB f32"), std::string::npos) << r.out;
}

// generate --chat renders the model's own template (the tiny checkpoint has Qwen3's): the same tokens as the text
// jinja2 renders given as a plain prompt; --chat-template FILE replaces it.
TEST_F(CliModel, GenerateChatRendersTheModelsTemplateOrTheGivenFile) {
    const auto tokens = [&](const std::string& args) {
        const Result r = run("generate " + model() + " --max-tokens 4 --json " + args, false);
        EXPECT_EQ(r.code, 0) << r.out;
        const auto j = nlohmann::json::parse(r.out);
        return std::make_pair(j["prompt_tokens"].get<int>(), j["tokens"]);
    };
    EXPECT_EQ(tokens("--chat --prompt 'Hello there'"),
              tokens("--prompt " + quote("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n")));
    write("mine.jinja", "{{ 'Q: ' ~ messages[0].content | upper }}\nA:\n");
    EXPECT_EQ(tokens("--chat --prompt 'Hello there' --chat-template " + quote((dir / "mine.jinja").string())),
              tokens("--prompt " + quote("Q: HELLO THERE\nA:")));
}

// A bad --chat-template file stops generate, chat and serve with a message naming the flag and the problem, before
// the model loads.
TEST_F(CliModel, ABadChatTemplateFileIsAClearError) {
    write("broken.jinja", "{% for m in messages %}\n{{ m.content }\n");
    const std::pair<std::string, std::string> files[] = {
        {quote((dir / "broken.jinja").string()), "the template does not parse: line 2"},
        {"/nonexistent/template.jinja", "--chat-template: /nonexistent/template.jinja:"},
    };
    for (const auto& [file, message] : files) {
        for (const std::string cmd : {"generate --chat --prompt Hi", "chat", "serve --port 0"}) {
            const Result r = run(cmd + " " + model() + " --chat-template " + file + " </dev/null");
            EXPECT_EQ(r.code, 1) << cmd << ": " << r.out;
            EXPECT_NE(r.out.find(message), std::string::npos) << cmd << ": " << r.out;
            EXPECT_EQ(r.out.find("model:"), std::string::npos) << "the model was loaded first: " << r.out;
        }
    }
    const Result no_chat = run("generate " + model() + " --prompt Hi --chat-template " + quote((dir / "x").string()));
    EXPECT_EQ(no_chat.code, 1);
    EXPECT_NE(no_chat.out.find("--chat-template needs --chat"), std::string::npos) << no_chat.out;
}

// --backend vulkan (skipped without a device): seeded generate gives the CPU backend's tokens (greedy and more
// settings: tests/engine/test_vulkan_decode.cpp).
TEST_F(CliModel, GenerateOnVulkanGivesTheCpusTokens) {
    const std::string why = backend_info("vulkan").unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    std::vector<nlohmann::json> tokens;
    for (const std::string backend : {"cpu", "vulkan"}) {
        const Result r = run("generate " + model() + " --backend " + backend +
                                 " --prompt 'Hello there' --max-tokens 6 --json --temperature 0.9 --top-k 40 "
                                 "--top-p 0.9 --seed 7",
                             false);
        ASSERT_EQ(r.code, 0) << r.out;
        tokens.push_back(nlohmann::json::parse(r.out)["tokens"]);
    }
    EXPECT_EQ(tokens[1], tokens[0]);
}

// One bounded request to `tracelm serve --backend vulkan` over loopback: its greedy completion is generate's text on
// the CPU backend.
TEST_F(CliModel, ServeOnVulkanAnswersAsGenerateOnTheCpuDoes) {
    const std::string why = backend_info("vulkan").unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    const Result want = run("generate " + model() + " --backend cpu --prompt 'Hello there' --max-tokens 6 --json", false);
    ASSERT_EQ(want.code, 0) << want.out;
    const std::string log = (dir / "serve.log").string();
    const Result started = testing::run_command(std::string(TRACELM_BINARY) + " serve " + model() +
                                                " --backend vulkan --port 0 --context 64 --max-seqs 2 >" + quote(log) +
                                                " 2>&1 & echo $!");
    const pid_t pid = std::stoi(started.out);
    // Stopped however the test ends, and waited for (its log's last line) so that no server outlives the test.
    struct Stop {
        pid_t pid;
        std::string log;
        ~Stop() {
            ::kill(pid, SIGINT);
            for (int i = 0; i < 100; ++i) {
                std::ifstream f(log);
                const std::string text((std::istreambuf_iterator<char>(f)), {});
                if (text.find("\nstopped") != std::string::npos) break;
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
        }
    } stop{pid, log};
    const std::string listening = "listening on http://127.0.0.1:";
    std::string text;
    for (int i = 0; i < 600 && text.find("\nready: ") == std::string::npos; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        text = read("serve.log");
    }
    const size_t at = text.find(listening);
    ASSERT_NE(at, std::string::npos) << text;
    const int port = std::stoi(text.substr(at + listening.size()));
    const auto got = testing::http_request(port, "POST", "/v1/completions",
                                           R"({"prompt": "Hello there", "max_tokens": 6, "temperature": 0})",
                                           {{"Content-Type", "application/json"}});
    ASSERT_TRUE(got.has_value()) << text;
    ASSERT_EQ(got->status, 200) << got->body;
    EXPECT_EQ(nlohmann::json::parse(got->body)["choices"][0]["text"], nlohmann::json::parse(want.out)["text"]);
}

// `tracelm devices` lists every backend: its devices as --device numbers them, or why it is unavailable here.
TEST(Cli, DevicesListsEachBackendsDevices) {
    const Result r = run("devices");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("cpu:\n  0: host CPU ("), std::string::npos) << r.out;
    // The kernels the child chose: it reads the same machine and TRACELM_ISA.
    EXPECT_NE(r.out.find(std::string(" threads, ") + cpu::isa_name(cpu::active_isa()) + " kernels)\n"), std::string::npos)
        << r.out;
    for (const BackendInfo& b : backend_registry()) {
        const std::string why = b.unavailable();
        EXPECT_NE(r.out.find(why.empty() ? b.name + ":\n  0: " : b.name + ": unavailable: " + why), std::string::npos)
            << r.out;
    }
    if (backend_info("vulkan").unavailable().empty()) {
        EXPECT_NE(r.out.find(" device-local)"), std::string::npos) << r.out;
    }
}

// A device number the backend does not have is refused by name, before the model is read.
TEST_F(CliModel, AMissingDeviceIsAClearError) {
    Result r = run("generate " + model() + " --backend cpu --device 1 --prompt hi --max-tokens 2");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("backend 'cpu' has one device, 0 (asked for device 1)"), std::string::npos) << r.out;
    if (!backend_info("vulkan").unavailable().empty()) return;
    r = run("generate " + model() + " --backend vulkan --device 9 --prompt hi --max-tokens 2");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("no Vulkan device 9"), std::string::npos) << r.out;
}

// A model whose weights and KV cache exceed the device's memory is refused before loading, both sizes named
// (TRACELM_VULKAN_HEAP_LIMIT_BYTES makes lavapipe's heap 16 MiB; the tiny model's f32 weights alone are larger).
TEST_F(CliModel, AModelLargerThanTheDeviceIsRefusedBeforeLoading) {
    const std::string why = backend_info("vulkan").unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    const std::string args = "generate " + model() + " --backend vulkan --prompt hi --max-tokens 2 --context 512";
    const Result r = testing::run_tracelm_env("TRACELM_VULKAN_HEAP_LIMIT_BYTES=16777216", args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("of device memory (weights "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("KV cache 0.5 MiB), more than the 16.0 MiB backend 'vulkan' has"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("model: "), std::string::npos) << r.out;  // the summary printed once the engine is made
    // With room for both it runs.
    EXPECT_EQ(testing::run_tracelm_env("TRACELM_VULKAN_HEAP_LIMIT_BYTES=4294967296", args).code, 0);
}

TEST(Cli, MissingModelFolderIsRefused) {
    const Result r = run("generate --model /nonexistent/model --prompt Hi");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("/nonexistent/model"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tracelm
