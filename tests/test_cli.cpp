// The `tracelm` executable as users and outside checks drive it: bad inputs give a clear message
// and a non-zero exit, good ones the documented output.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "test_support.h"

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
    EXPECT_GT(j["decode_bytes_per_token"].get<double>(), 0);
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

TEST(Cli, MissingModelFolderIsRefused) {
    const Result r = run("generate --model /nonexistent/model --prompt Hi");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("/nonexistent/model"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tracelm
