// The default-model cache: where it lives, the checksum it relies on, and that a cached model is used
// without fetching.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "checkpoint/model_cache.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

TEST(ModelCache, Sha256MatchesTheStandardTestVectors) {
    const std::string path = (std::filesystem::temp_directory_path() / "tracelm-sha-abc").string();
    {
        std::ofstream(path, std::ios::binary) << "abc";
    }
    // FIPS 180-2, appendix B.1.
    EXPECT_EQ(sha256_file(path), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    { std::ofstream(path, std::ios::binary | std::ios::trunc); }
    EXPECT_EQ(sha256_file(path), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    std::filesystem::remove(path);
    EXPECT_THROW(sha256_file(path), std::runtime_error);
}

TEST(ModelCache, UsesTheCachedModelWithoutFetching) {
    TRACELM_NEED_SMOLLM2();
    const std::string cache = std::filesystem::path(testing::smollm2_gguf_path()).parent_path().parent_path().string();
    const char* old = std::getenv("TRACELM_CACHE");
    const std::string saved = old ? old : "";
    setenv("TRACELM_CACHE", cache.c_str(), 1);
    EXPECT_EQ(cache_dir(), cache);
    bool fetched = false;
    EXPECT_EQ(ensure_default_model([&](const std::string&) { fetched = true; }), testing::smollm2_gguf_path());
    EXPECT_FALSE(fetched);
    if (old) {
        setenv("TRACELM_CACHE", saved.c_str(), 1);
    } else {
        unsetenv("TRACELM_CACHE");
    }
}

TEST(ModelCache, CachedFileHasTheRecordedChecksum) {
    TRACELM_NEED_SMOLLM2();
    EXPECT_EQ(sha256_file(testing::smollm2_gguf_path()), DefaultModel::kSha256);
}

}  // namespace
}  // namespace tracelm
