// `cmake --install` gives a tracelm that works on its own: from another directory, with the build and source trees
// out of its reach, it finds its data (the Qwen3 tokenizer of random checkpoints) and generates text.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.h"

namespace tracelm {
namespace {

namespace fs = std::filesystem;

TEST(Install, InstalledBinaryGeneratesFromAnotherDirectory) {
    const testing::TempDir prefix;
    const std::string build = fs::path(TRACELM_BINARY).parent_path().string();
    ASSERT_EQ(std::system(("cmake --install '" + build + "' --prefix '" + prefix.str() + "' > /dev/null").c_str()), 0);
    const std::string bin = prefix.str("bin/tracelm");
    // A working directory that holds nothing of tracelm's; TRACELM_DATA_DIR unset so the binary looks next to itself.
    const std::string cmd = "cd '" + prefix.str() + "' && env -u TRACELM_DATA_DIR '" + bin +
                            "' make-checkpoint --geometry tiny --seed 4 --out ck > /dev/null && env -u TRACELM_DATA_DIR '" +
                            bin + "' generate --model ck --prompt 'hello there' --max-tokens 3 --json > out.json";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(prefix.str("out.json"));
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str());
    EXPECT_EQ(j.at("tokens").size(), 3u) << text.str();
    EXPECT_TRUE(j.at("capture").get<bool>());
    EXPECT_EQ(fs::file_size(prefix.str("ck/tokenizer.json")),
              fs::file_size(testing::repo_path("models/qwen3-tokenizer/tokenizer.json")));
}

TEST(Install, VersionNamesTheProgramAndHelpListsEveryCommand) {
    const auto v = testing::run_tracelm("--version");
    EXPECT_EQ(v.code, 0);
    EXPECT_EQ(v.out.rfind("tracelm ", 0), 0u) << v.out;
    const auto h = testing::run_tracelm("--help");
    EXPECT_EQ(h.code, 0);
    for (const char* sub : {"generate", "chat", "tokenize", "bench", "make-checkpoint", "fetch-model"})
        EXPECT_NE(h.out.find(sub), std::string::npos) << sub << "\n" << h.out;
}

}  // namespace
}  // namespace tracelm
