// The CLI's sampling flags (cli/sampling_flags.h) through `tracelm generate` and `chat` on a generated checkpoint:
// the JSON output reports the seed and logprobs, a seed reproduces a run, the default is greedy, and invalid values
// name their flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "support/test_support.h"

namespace tracelm {
namespace {

std::string tiny_model_flag() { return "--model '" + testing::generated_checkpoint("tiny", 3, DType::F32) + "'"; }

TEST(SamplingCli, GenerateJsonReportsSeedAndLogprobs) {
    const std::string cmd = "generate " + tiny_model_flag() +
                            " --prompt 'Hello there' --max-tokens 8 --json --threads 1 --temperature 0.9 --top-k 50"
                            " --top-p 0.95 --min-p 0.01 --repeat-penalty 1.1 --presence-penalty 0.2"
                            " --frequency-penalty 0.1 --seed 12345 --logprobs 3";
    const auto r1 = testing::run_tracelm(cmd, false), r2 = testing::run_tracelm(cmd, false);
    ASSERT_EQ(r1.code, 0) << r1.out;
    const auto j = nlohmann::json::parse(r1.out);
    EXPECT_EQ(j["seed"], 12345u);
    EXPECT_EQ(j["tokens"], nlohmann::json::parse(r2.out)["tokens"]);  // the seed reproduces the run
    ASSERT_EQ(j["logprobs"].size(), j["tokens"].size());
    for (size_t i = 0; i < j["tokens"].size(); ++i) {
        const auto& e = j["logprobs"][i];
        EXPECT_EQ(e["id"], j["tokens"][i]);
        EXPECT_LE(e["logprob"].get<double>(), 0.0);
        ASSERT_EQ(e["top_logprobs"].size(), 3u);
        EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
        EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>());
    }
}

TEST(SamplingCli, DefaultIsGreedyAndUnseededRunsReportTheirSeed) {
    const std::string base = "generate " + tiny_model_flag() + " --prompt 'Hello there' --max-tokens 8 --json --threads 1";
    const auto greedy = testing::run_tracelm(base, false);
    const auto zero = testing::run_tracelm(base + " --temperature 0 --top-k 3", false);
    const auto sampled = testing::run_tracelm(base + " --temperature 1.5", false);
    ASSERT_EQ(greedy.code, 0) << greedy.out;
    ASSERT_EQ(sampled.code, 0) << sampled.out;
    EXPECT_EQ(nlohmann::json::parse(greedy.out)["tokens"], nlohmann::json::parse(zero.out)["tokens"]);
    const auto js = nlohmann::json::parse(sampled.out);
    const auto again = testing::run_tracelm(base + " --temperature 1.5 --seed " + js["seed"].dump(), false);
    EXPECT_EQ(nlohmann::json::parse(again.out)["tokens"], js["tokens"]);
    EXPECT_FALSE(nlohmann::json::parse(greedy.out).contains("logprobs"));
}

TEST(SamplingCli, InvalidValuesNameTheFlag) {
    const std::string base = "generate " + tiny_model_flag() + " --prompt hi --max-tokens 2 ";
    for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
             {"--temperature -1", "--temperature"},
             {"--temperature nan", "--temperature"},
             {"--top-p 1.5", "--top-p"},
             {"--top-p 0", "--top-p"},
             {"--top-k -1", "--top-k"},
             {"--min-p nan", "--min-p"},
             {"--logprobs 21", "--logprobs"},
             {"--repeat-penalty 0", "--repeat-penalty"}}) {
        const auto r = testing::run_tracelm(base + args);
        EXPECT_EQ(r.code, 1) << args << ": " << r.out;
        EXPECT_NE(r.out.find(flag), std::string::npos) << args << ": " << r.out;
    }
    const auto chat = testing::run_tracelm("chat " + tiny_model_flag() + " --top-p 2 < /dev/null");
    EXPECT_EQ(chat.code, 1) << chat.out;
    EXPECT_NE(chat.out.find("--top-p"), std::string::npos) << chat.out;
}

}  // namespace
}  // namespace tracelm
