// Which pooling a model's files name (serve/pooling.h): a GGUF's <arch>.pooling_type as llama.cpp numbers it, and the
// sentence-transformers pooling config of a folder, in both of its forms (the contents of Qwen3-Embedding's and
// all-MiniLM-L6-v2's 1_Pooling/config.json).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "formats/gguf_writer.h"
#include "serve/pooling.h"

namespace tracelm::serve {
namespace {

Pooling of_gguf(std::optional<uint32_t> type) {
    GgufWriter w;
    w.add_string("general.architecture", "qwen3");
    if (type) w.add_u32("qwen3.pooling_type", *type);
    const std::string path =
        (std::filesystem::temp_directory_path() / ("tracelm-pooling-" + std::to_string(getpid()) + ".gguf")).string();
    w.write(path);
    const GgufFile g(path);
    std::filesystem::remove(path);  // mapped: stays readable
    return gguf_pooling(g);
}

TEST(Pooling, GgufPoolingTypeIsLlamaCppsEnum) {
    EXPECT_EQ(of_gguf(std::nullopt), Pooling::Unspecified);
    EXPECT_EQ(of_gguf(0), Pooling::Unspecified);  // LLAMA_POOLING_TYPE_NONE
    EXPECT_EQ(of_gguf(1), Pooling::Mean);
    EXPECT_EQ(of_gguf(2), Pooling::Cls);
    EXPECT_EQ(of_gguf(3), Pooling::Last);
    EXPECT_EQ(of_gguf(4), Pooling::Other);  // rank
}

TEST(Pooling, SentenceTransformersConfigIsRead) {
    const std::string qwen3_embedding = R"({"word_embedding_dimension": 1024, "pooling_mode_cls_token": false,
        "pooling_mode_mean_tokens": false, "pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false,
        "pooling_mode_weightedmean_tokens": false, "pooling_mode_lasttoken": true, "include_prompt": true})";
    EXPECT_EQ(sentence_transformers_pooling(qwen3_embedding, "c"), Pooling::Last);
    const std::string minilm = R"({"word_embedding_dimension": 384, "pooling_mode_cls_token": false,
        "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false})";
    EXPECT_EQ(sentence_transformers_pooling(minilm, "c"), Pooling::Mean);
    EXPECT_EQ(sentence_transformers_pooling(R"({"pooling_mode_cls_token": true})", "c"), Pooling::Cls);
    EXPECT_EQ(sentence_transformers_pooling(R"({"pooling_mode_max_tokens": true})", "c"), Pooling::Other);
    EXPECT_EQ(sentence_transformers_pooling(R"({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true})",
                                            "c"),
              Pooling::Other);  // concatenated
    EXPECT_EQ(sentence_transformers_pooling(R"({"pooling_mode": "lasttoken"})", "c"), Pooling::Last);
    EXPECT_EQ(sentence_transformers_pooling(R"({"pooling_mode": "mean"})", "c"), Pooling::Mean);
    EXPECT_EQ(sentence_transformers_pooling(R"({"word_embedding_dimension": 8})", "c"), Pooling::Unspecified);
    EXPECT_THROW(sentence_transformers_pooling("[1]", "c"), std::runtime_error);
    EXPECT_THROW(sentence_transformers_pooling("{", "c"), std::runtime_error);
    EXPECT_TRUE(embeds(Pooling::Last));
    EXPECT_TRUE(embeds(Pooling::Unspecified));
    EXPECT_FALSE(embeds(Pooling::Mean));
}

TEST(Pooling, AFolderWithoutAPoolingConfigNamesNone) {
    const auto dir = std::filesystem::temp_directory_path() / ("tracelm-pooling-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir / "1_Pooling");
    EXPECT_EQ(folder_pooling(dir.string()), Pooling::Unspecified);
    std::ofstream(dir / "1_Pooling" / "config.json") << R"({"pooling_mode_mean_tokens": true})";
    EXPECT_EQ(folder_pooling(dir.string()), Pooling::Mean);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tracelm::serve
