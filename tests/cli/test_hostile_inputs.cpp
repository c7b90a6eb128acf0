// Hostile model folders and inputs (issue 15): every file is generated here, small, and built the way a
// stranger would build it; the `tracelm` executable must answer each with a clear message and exit code 1,
// never a crash, hang, memory blow-up, raw control byte on the terminal, or silent success.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "checkpoint/gguf_convert.h"
#include "model/weight_check.h"
#include "runtime/untrusted.h"
#include "support/test_support.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tracelm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;
using tokenizer_detail::NormalForm;
using tokenizer_detail::unicode_normalize;

// Where the child's standard output goes.
enum class Out { File, DevFull, Closed, BrokenPipe };

struct Child {
    int code;         // exit status, or 128 + signal
    std::string out;  // standard output (Out::File only)
    std::string err;  // standard error
    long peak_rss_mib;
};

// Peak RSS bound for the memory cases. The child's figure from wait4 also counts the test process's
// resident memory at fork (the forked copy is the child's first address space), so it is an upper bound.
constexpr long kPeakRssBoundMib = 512;

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// Runs tracelm with `args` (no shell involved), stdin from /dev/null. SIGALRM ends it after 120 s, so a
// hang fails the test instead of stalling the suite.
Child run(const std::vector<std::string>& args, Out out = Out::File) {
    const TempDir io;
    const std::string out_path = io.file("stdout"), err_path = io.file("stderr");
    std::vector<std::string> owned = {TRACELM_BINARY};
    owned.insert(owned.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : owned) argv.push_back(a.data());
    argv.push_back(nullptr);
    int pipe_fds[2] = {-1, -1};
    if (out == Out::BrokenPipe) {
        if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
        ::close(pipe_fds[0]);  // the reader is gone before the first write
    }
    const pid_t pid = ::fork();
    if (pid == 0) {  // only async-signal-safe calls until exec
        const auto put = [](const char* path, int flags, int fd) {
            const int f = ::open(path, flags, 0644);
            if (f < 0 || ::dup2(f, fd) < 0) ::_exit(126);
            if (f != fd) ::close(f);
        };
        put("/dev/null", O_RDONLY, 0);
        put(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 2);
        switch (out) {
            case Out::File: put(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 1); break;
            case Out::DevFull: put("/dev/full", O_WRONLY, 1); break;
            case Out::Closed: ::close(1); break;
            case Out::BrokenPipe:
                ::dup2(pipe_fds[1], 1);
                ::close(pipe_fds[1]);
                break;
        }
        ::alarm(120);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
    int status = 0;
    struct rusage ru {};
    if (::wait4(pid, &status, 0, &ru) != pid) throw std::runtime_error("wait4 failed");
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(out_path), slurp(err_path),
            ru.ru_maxrss / 1024};
}

// A refusal: exit code 1, the message on stderr, no raw control byte (ESC, BEL, NUL) reaching the terminal.
void expect_refused(const Child& c, const std::string& message) {
    EXPECT_EQ(c.code, 1) << c.err;
    EXPECT_NE(c.err.find(message), std::string::npos) << "expected \"" << message << "\" in:\n" << c.err;
    EXPECT_EQ(c.err.find_first_of(std::string("\x1b\x07\0", 3)), std::string::npos) << c.err;
}

void write(const fs::path& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) throw std::runtime_error("cannot write " + path.string());
}

using testing::repeat;

// `depth` levels of open ... close around `inner`.
std::string nested(const std::string& open, const std::string& inner, const std::string& close, int depth) {
    return repeat(open, depth) + inner + repeat(close, depth);
}

constexpr const char* kByteLevel = R"({"type": "ByteLevel", "add_prefix_space": false})";

// The smallest tokenizer.json this reader accepts ("h" and "i" its only tokens), with the given pre-tokenizer
// and `extra` members added at the top level.
std::string tokenizer_json(const std::string& pre_tokenizer = kByteLevel, const std::string& extra = "") {
    return R"({"model": {"type": "BPE", "vocab": {"h": 0, "i": 1}, "merges": []}, "decoder": {"type": "ByteLevel"}, )"
           R"("pre_tokenizer": )" + pre_tokenizer + (extra.empty() ? std::string() : ", " + extra) + "}";
}

// A folder holding only a tokenizer.json: enough for `tokenize`.
struct TokenizerFolder {
    TempDir dir;
    explicit TokenizerFolder(const std::string& text) { write(dir.path() / "tokenizer.json", text); }
    Child tokenize() const { return run({"tokenize", "--model", dir.str(), "--text", "hi"}); }
};

// A copy of the tiny random checkpoint (f32 safetensors, Qwen3 tokenizer) that a test may damage.
struct ModelFolder {
    TempDir tmp;
    fs::path dir = tmp.path() / "model";
    ModelFolder() { fs::copy(testing::generated_checkpoint("tiny", 3, DType::F32), dir, fs::copy_options::recursive); }
    std::string str() const { return dir.string(); }
    Child generate(const std::vector<std::string>& extra = {}, Out out = Out::File) const {
        std::vector<std::string> args = {"generate", "--model", str(), "--prompt", "Hello", "--max-tokens", "3",
                                         "--threads", "1"};
        args.insert(args.end(), extra.begin(), extra.end());
        return run(args, out);
    }
};

void make_fifo(const fs::path& path) {
    fs::remove(path);
    if (::mkfifo(path.c_str(), 0644) != 0) throw std::runtime_error("mkfifo failed");
}

// ---- 1. Stack overflow on nesting ----

TEST(HostileInputs, DeeplyNestedPreTokenizerIsRefusedBeforeAnyRecursion) {
    const std::string seq = R"({"type": "Sequence", "pretokenizers": [)";
    const TokenizerFolder folder(tokenizer_json(nested(seq, kByteLevel, "]}", 30000)));
    const Child c = folder.tokenize();
    expect_refused(c, "tokenizer.json: JSON nested deeper than 64 levels (the limit)");
    EXPECT_LT(c.peak_rss_mib, kPeakRssBoundMib);

    // The same file in a model folder: generate refuses it too.
    const ModelFolder model;
    fs::copy_file(folder.dir.path() / "tokenizer.json", model.dir / "tokenizer.json",
                  fs::copy_options::overwrite_existing);
    expect_refused(model.generate(), "tokenizer.json: JSON nested deeper than 64 levels (the limit)");
}

TEST(HostileInputs, DeeplyNestedDsaTopkCaseIsRefused) {
    const TempDir dir;
    write(dir.path() / "case.json", R"({"scores": [[1, 2]], "window_start": [0], "window_end": [2], "topk": )" +
                                        nested("[", "1", "]", 100000) + "}");
    const Child c = run({"dsa-topk", "--input", dir.file("case.json")});
    expect_refused(c, "case.json: JSON nested deeper than 64 levels (the limit)");
}

TEST(HostileInputs, NestingUpToTheLimitIsAccepted) {
    // 62 Sequences plus the outer object and the list around the innermost step: 64 levels below the root.
    const std::string seq = R"({"type": "Sequence", "pretokenizers": [)";
    const TokenizerFolder folder(tokenizer_json(nested(seq, kByteLevel, "]}", 31)));
    const Child c = folder.tokenize();
    EXPECT_EQ(c.code, 0) << c.err;
    EXPECT_EQ(c.out, "[0,1]\n");
}

// ---- 2. Quadratic memory ----

TEST(HostileInputs, DeeplyNestedNormalizerStaysSmall) {
    const std::string seq = R"({"type": "Sequence", "normalizers": [)";
    for (const int depth : {10000, 200000}) {
        const TokenizerFolder folder(tokenizer_json(kByteLevel, R"("normalizer": )" + nested(seq, R"({"type": "NFC"})", "]}", depth)));
        const Child c = folder.tokenize();
        expect_refused(c, "tokenizer.json: JSON nested deeper than 64 levels (the limit)");
        EXPECT_LT(c.peak_rss_mib, kPeakRssBoundMib) << "depth " << depth;
    }
}

// A chain of normalizers is folded into one form (a 100,000-step list costs one pass per text). The fold
// rests on Unicode's stability: checked here against applying every step in turn.
TEST(HostileInputs, NormalizerChainEqualsItsFoldedForm) {
    const std::string text = "\xef\xac\x81 A\xcc\x8a \xc3\x85 e\xcc\x81 \xe2\x91\xa0 \xed\x95\x9c \xe1\x84\x92\xe1\x85\xa1 x\xc2\xb2";
    const NormalForm forms[] = {NormalForm::NFC, NormalForm::NFD, NormalForm::NFKC, NormalForm::NFKD};
    for (const NormalForm a : forms) {
        for (const NormalForm b : forms) {
            const bool compat = a == NormalForm::NFKC || a == NormalForm::NFKD || b == NormalForm::NFKC ||
                                b == NormalForm::NFKD;
            const bool composed = b == NormalForm::NFC || b == NormalForm::NFKC;
            const NormalForm folded = compat ? (composed ? NormalForm::NFKC : NormalForm::NFKD)
                                             : (composed ? NormalForm::NFC : NormalForm::NFD);
            EXPECT_EQ(unicode_normalize(unicode_normalize(text, a), b), unicode_normalize(text, folded))
                << static_cast<int>(a) << " then " << static_cast<int>(b);
        }
    }
    // And the tokenizer applies the folded form. Its vocabulary is the 256 bytes (token id = byte), so the
    // ids are the bytes of the normalized text: a 100,000-step chain ending in NFC with one NFKD gives NFKC.
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[tokenizer_detail::byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
    json chain = {{"type", "Sequence"}, {"normalizers", json::array()}};
    for (int i = 0; i < 100000; ++i) chain["normalizers"].push_back({{"type", i == 500 ? "NFKD" : "NFC"}});
    const json doc = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
                      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                      {"decoder", {{"type", "ByteLevel"}}},
                      {"normalizer", chain}};
    const std::vector<int32_t> ids = Tokenizer::from_json_text(doc.dump()).encode(text);
    const std::string nfkc = unicode_normalize(text, NormalForm::NFKC);
    ASSERT_NE(nfkc, unicode_normalize(text, NormalForm::NFC));
    std::vector<int32_t> expected;
    for (const char c : nfkc) expected.push_back(static_cast<unsigned char>(c));
    EXPECT_EQ(ids, expected);
}

// ---- 3. Special files ----

TEST(HostileInputs, FifoConfigAndShardAreRefusedWithoutBlocking) {
    {
        const ModelFolder model;
        make_fifo(model.dir / "config.json");
        expect_refused(model.generate(), "config.json: not a regular file: it is a FIFO");
    }
    {
        const TempDir tmp;
        MakeCheckpointOptions opt;
        opt.geometry = "tiny";
        opt.seed = 5;
        opt.out = tmp.str("sharded");
        opt.tokenizer_dir = testing::repo_path("models/qwen3-tokenizer");
        opt.max_shard_bytes = 64 << 10;
        make_random_checkpoint(opt);
        fs::path victim;
        for (const auto& e : fs::directory_iterator(opt.out))
            if (e.path().filename().string().starts_with("model-00002-of-")) victim = e.path();
        ASSERT_FALSE(victim.empty());
        make_fifo(victim);
        const Child c = run({"generate", "--model", opt.out, "--prompt", "Hi", "--max-tokens", "1"});
        expect_refused(c, victim.filename().string() + ": not a regular file: it is a FIFO");
    }
    {
        const TokenizerFolder folder(tokenizer_json());
        make_fifo(folder.dir.path() / "tokenizer_config.json");
        expect_refused(folder.tokenize(), "tokenizer_config.json: not a regular file: it is a FIFO");
        make_fifo(folder.dir.path() / "tokenizer.json");
        expect_refused(folder.tokenize(), "tokenizer.json: not a regular file: it is a FIFO");
    }
}

// ---- 4. Terminal injection ----

TEST(HostileInputs, ControlBytesFromFilesAreEscapedInMessages) {
    const TempDir dir;
    {
        GgufWriter w;
        w.add_string("general.architecture", std::string("x\x1b]0;owned\x07\0tail", 16));
        w.write(dir.file("arch.gguf"));
        expect_refused(run({"generate", "--model", dir.file("arch.gguf"), "--prompt", "Hi"}),
                       "general.architecture 'x\\x1b]0;owned\\x07\\x00tail' is not supported");
    }
    {
        GgufWriter w;
        w.add_string("general.architecture", std::string(10000, 'A'));
        w.write(dir.file("long.gguf"));
        const Child c = run({"generate", "--model", dir.file("long.gguf"), "--prompt", "Hi"});
        expect_refused(c, "AAAA...(10000 bytes)' is not supported");
        EXPECT_LT(c.err.size(), 1000u);
    }
    {
        // A tensor name with ESC, BEL and NUL in a safetensors header.
        const ModelFolder model;
        const std::string header =
            R"({"evil\u001b[31m\u0007\u0000name": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}})";
        std::string file(8, '\0');
        for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
        write(model.dir / "model.safetensors", file + header + std::string(4, '\0'));
        expect_refused(model.generate(), "tensor 'evil\\x1b[31m\\x07\\x00name': unsupported dtype 'Q9'");
    }
    {
        // A chat template's own error message is quoted escaped.
        const ModelFolder model;
        json config = json::parse(slurp((model.dir / "tokenizer_config.json").string()));
        config["chat_template"] = "{{ raise_exception('\x1b[2J\x1b]0;title\x07 no') }}";
        write(model.dir / "tokenizer_config.json", config.dump());
        expect_refused(model.generate({"--chat"}), "line 1: \\x1b[2J\\x1b]0;title\\x07 no");
    }
}

TEST(HostileInputs, EscapeHexesControlBytesKeepsUtf8AndTruncates) {
    EXPECT_EQ(untrusted::escape(std::string("a\x1b[1m\x07\0b\\", 9)), "a\\x1b[1m\\x07\\x00b\\x5c");
    EXPECT_EQ(untrusted::escape("caf\xc3\xa9 \xe2\x9c\x93"), "caf\xc3\xa9 \xe2\x9c\x93");  // UTF-8 stays readable
    EXPECT_EQ(untrusted::escape("\xc2\x9b" "31m"), "\\xc2\\x9b31m");  // C1 CSI
    EXPECT_EQ(untrusted::escape("\xff\xc3"), "\\xff\\xc3");          // not UTF-8
    EXPECT_EQ(untrusted::escape(std::string(300, 'z'), 5), "zzzzz...(300 bytes)");
}

// ---- 5. Misleading messages ----

TEST(HostileInputs, ModelPathSaysWhatItIs) {
    const TempDir dir;
    make_fifo(dir.path() / "fifo");
    const std::pair<std::string, std::string> cases[] = {
        {"/dev/null", "model '/dev/null' is a character device, not a model folder or a .gguf file"},
        {"/dev/zero", "model '/dev/zero' is a character device, not a model folder or a .gguf file"},
        {dir.file("fifo"), "model '" + dir.file("fifo") + "' is a FIFO, not a model folder or a .gguf file"},
    };
    for (const auto& [path, message] : cases) {
        expect_refused(run({"generate", "--model", path, "--prompt", "Hi"}), message);
        expect_refused(run({"tokenize", "--model", path, "--text", "Hi"}), message);
    }
}

TEST(HostileInputs, EmptyTokenizerJsonSaysItIsEmpty) {
    const TokenizerFolder folder("");
    expect_refused(folder.tokenize(), "tokenizer.json: the file is empty");
}

TEST(HostileInputs, MissingKeyLengthIsReportedAsMissing) {
    const TempDir dir;
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.block_count", 1);
    w.add_u32("llama.context_length", 128);
    w.add_u32("llama.embedding_length", 1);
    w.add_u32("llama.feed_forward_length", 128);
    w.add_u32("llama.attention.head_count", 4);
    w.write(dir.file("m.gguf"));
    expect_refused(run({"generate", "--model", dir.file("m.gguf"), "--prompt", "Hi"}),
                   "metadata key 'llama.attention.key_length' is missing, and its default from the other keys, 0, "
                   "is outside [2, 1024]");
}

TEST(HostileInputs, ChatWithoutTemplateSaysSoForChat) {
    const ModelFolder model;
    json config = json::parse(slurp((model.dir / "tokenizer_config.json").string()));
    config.erase("chat_template");
    write(model.dir / "tokenizer_config.json", config.dump());
    const Child chat = run({"chat", "--model", model.str(), "--threads", "1"});
    expect_refused(chat, "chat needs a model with a chat template, and this one has none (give one with "
                         "--chat-template FILE");
    EXPECT_EQ(chat.err.find("--chat "), std::string::npos) << chat.err;  // generate's flag is not chat's
    expect_refused(model.generate({"--chat"}), "the model has no chat template; use a plain prompt without --chat");
}

// A model whose chat template loops without end, recurses or builds a gigabyte string: generate --chat stops with the
// limit's message (docs/security.md), quickly, and within 128 MiB of what the same command takes with the model's own
// template (AddressSanitizer keeps up to 256 MiB of freed memory in quarantine on top).
TEST(HostileInputs, AHostileChatTemplateStopsAtItsLimit) {
#ifdef __SANITIZE_ADDRESS__
    constexpr long kSlackMib = 128 + 256;
#else
    constexpr long kSlackMib = 128;
#endif
    const ModelFolder plain;
    const Child baseline = plain.generate({"--chat"});
    ASSERT_EQ(baseline.code, 0) << baseline.err;
    const std::pair<std::string, std::string> cases[] = {
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         "the template exceeded its limit of 1000000 loop iterations"},
        {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "the template exceeded its limit of 64 nested macro calls"},
        {"{{ 'x' * 10 ** 9 }}", "the template exceeded its limit of 268435456 allocated bytes"},
    };
    for (const auto& [tmpl, message] : cases) {
        const ModelFolder model;
        json config = json::parse(slurp((model.dir / "tokenizer_config.json").string()));
        config["chat_template"] = tmpl;
        write(model.dir / "tokenizer_config.json", config.dump());
        const Child c = model.generate({"--chat"});
        expect_refused(c, message);
        EXPECT_LT(c.peak_rss_mib, baseline.peak_rss_mib + kSlackMib) << message;
    }
}

TEST(HostileInputs, JsonlLinesWithBadUtf8OrLoneSurrogatesSaySo) {
    const TokenizerFolder folder(tokenizer_json());
    const fs::path jsonl = folder.dir.path() / "in.jsonl";
    write(jsonl, "{\"text\": \"hi\"}\n{\"text\": \"h\xff\x1b\"}\n");
    Child c = run({"tokenize", "--model", folder.dir.str(), "--jsonl", jsonl.string()});
    expect_refused(c, "in.jsonl:2: invalid JSON: ");
    EXPECT_NE(c.err.find("ill-formed UTF-8 byte"), std::string::npos) << c.err;
    EXPECT_EQ(c.out, "[0,1]\n");
    write(jsonl, "{\"text\": \"\\ud800 alone\"}\n");
    c = run({"tokenize", "--model", folder.dir.str(), "--jsonl", jsonl.string()});
    expect_refused(c, "in.jsonl:1: invalid JSON: ");
    EXPECT_NE(c.err.find("surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"), std::string::npos) << c.err;
}

// ---- 6. Silent acceptance ----

TEST(HostileInputs, MakeCheckpointNumbersAreRangeChecked) {
    const TempDir dir;
    const std::string range = "must be an integer in [0, 18446744073709551615], got ";
    expect_refused(run({"make-checkpoint", "--geometry", "tiny", "--seed", "-1", "--out", dir.str("a")}),
                   "--seed " + range + "'-1'");
    expect_refused(run({"make-checkpoint", "--geometry", "tiny", "--seed", "99999999999999999999999", "--out",
                        dir.str("a")}),
                   "--seed " + range + "'99999999999999999999999'");
    expect_refused(run({"make-checkpoint", "--geometry", "tiny", "--seed", "1", "--max-shard-bytes", "-5", "--out",
                        dir.str("a")}),
                   "--max-shard-bytes " + range + "'-5'");
    EXPECT_FALSE(fs::exists(dir.path() / "a"));
    // The largest seed is a seed.
    const Child ok = run({"make-checkpoint", "--geometry", "tiny", "--seed", "18446744073709551615", "--out",
                          dir.str("b")});
    EXPECT_EQ(ok.code, 0) << ok.err;
    EXPECT_NE(ok.out.find("seed 18446744073709551615"), std::string::npos) << ok.out;
}

TEST(HostileInputs, NonFiniteWeightIsRefusedAtLoad) {
    const ModelFolder model;
    // Put a NaN into model.norm.weight, found through the file's own header.
    const std::string path = (model.dir / "model.safetensors").string();
    const std::string bytes = slurp(path);
    uint64_t header_bytes = 0;
    for (int i = 0; i < 8; ++i) header_bytes |= uint64_t{static_cast<unsigned char>(bytes[static_cast<size_t>(i)])} << (8 * i);
    const json header = json::parse(bytes.substr(8, header_bytes));
    const uint64_t at = 8 + header_bytes + header["model.norm.weight"]["data_offsets"][0].get<uint64_t>() + 4 * 5;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(&nan), sizeof(nan));
    f.close();
    expect_refused(model.generate(), "tensor 'model.norm.weight' in " + model.str() +
                                         " holds NaN or infinity (element 5); the weights are broken");
}

// A random Qwen3-MoE GGUF (moe-tiny: 8 experts of 32, 2 per token) with one integer of its metadata overwritten in
// place: absurd or contradictory expert counts and widths are refused naming the key, or the first tensor whose
// shape they contradict, with exit code 1 and bounded memory (nothing sized by the absurd value is allocated).
TEST(HostileInputs, HostileMoeMetadataIsRefusedByName) {
    const TempDir dir;
    const std::string good = dir.str("moe.gguf");
    ASSERT_EQ(run({"make-checkpoint", "--geometry", "moe-tiny", "--seed", "2", "--format", "gguf", "--dtype", "q8_0",
                   "--out", good}).code, 0);
    const std::string bytes = slurp(good);
    // GGUF metadata: key length (u64), key, value type (u32), value; the integer types the writer may use.
    const auto patched = [&](const std::string& key, uint64_t value) {
        const size_t at = bytes.find(key);
        EXPECT_NE(at, std::string::npos) << key;
        std::string out = bytes;
        uint32_t type = 0;
        std::memcpy(&type, out.data() + at + key.size(), 4);
        const size_t width = type == 4 || type == 5 ? 4 : type == 10 || type == 11 ? 8 : 0;
        EXPECT_NE(width, 0u) << key << " has value type " << type;
        std::memcpy(out.data() + at + key.size() + 4, &value, width);
        const std::string path = dir.str("bad.gguf");
        write(path, out);
        return path;
    };
    const auto generate = [&](const std::string& path) {
        return run({"generate", "--model", path, "--prompt", "Hello", "--max-tokens", "2", "--threads", "1"});
    };
    for (const uint64_t absurd : {uint64_t{0}, uint64_t{1} << 31, (uint64_t{1} << 32) - 1}) {
        const Child c = generate(patched("qwen3moe.expert_count", absurd));
        expect_refused(c, "qwen3moe.expert_count");
        EXPECT_LT(c.peak_rss_mib, kPeakRssBoundMib);
    }
    expect_refused(generate(patched("qwen3moe.expert_used_count", 9)), "qwen3moe.expert_used_count");
    expect_refused(generate(patched("qwen3moe.expert_used_count", 0)), "qwen3moe.expert_used_count");
    const Child wide = generate(patched("qwen3moe.expert_feed_forward_length", uint64_t{1} << 40));
    expect_refused(wide, "qwen3moe.expert_feed_forward_length");
    EXPECT_LT(wide.peak_rss_mib, kPeakRssBoundMib);
    // Plausible values that the stacked tensors contradict.
    expect_refused(generate(patched("qwen3moe.expert_count", 16)), "tensor 'model.layers.0.mlp.gate.weight'");
    expect_refused(generate(patched("qwen3moe.expert_feed_forward_length", 64)),
                   "tensor 'model.layers.0.mlp.experts.gate_proj.weight'");
    EXPECT_EQ(generate(good).code, 0);
}

TEST(HostileInputs, NonFiniteCheckCoversEveryWeightType) {
    const auto f16_inf = uint16_t{0x7c00}, f16_nan = uint16_t{0x7e00}, bf16_nan = uint16_t{0x7fc0};
    const auto put16 = [](std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(b.data() + at, &v, 2); };
    {
        std::vector<float> v = {1, -2, 3e38f, -0.0f};
        EXPECT_EQ(first_non_finite(DType::F32, v.data(), 16), std::nullopt);
        v[2] = -std::numeric_limits<float>::infinity();
        EXPECT_EQ(first_non_finite(DType::F32, v.data(), 16), 2);
    }
    {
        std::vector<uint8_t> b(8, 0);
        put16(b, 6, bf16_nan);
        EXPECT_EQ(first_non_finite(DType::BF16, b.data(), b.size()), 3);
        put16(b, 6, 0x7f7f);  // the largest finite bf16
        EXPECT_EQ(first_non_finite(DType::BF16, b.data(), b.size()), std::nullopt);
        put16(b, 2, f16_inf);
        EXPECT_EQ(first_non_finite(DType::F16, b.data(), b.size()), 1);
    }
    // Quantized blocks: the f16 scale (and minimum) of the second block; the packed integers never are.
    struct Case {
        DType type;
        size_t field;
    };
    for (const Case c : {Case{DType::Q8_0, 0}, Case{DType::Q4_0, 0}, Case{DType::Q5_0, 0}, Case{DType::Q4_1, 2},
                         Case{DType::Q5_1, 2}, Case{DType::Q4_K, 0}, Case{DType::Q5_K, 2}, Case{DType::Q6_K, 208}}) {
        const size_t block = dtype_block_bytes(c.type);
        std::vector<uint8_t> b(3 * block, 0xff);  // every non-scale byte all ones
        for (size_t k = 0; k < 3; ++k) {
            put16(b, k * block, 0x3c00);
            if (c.field != 0) put16(b, k * block + c.field, 0x3c00);
            if (c.type == DType::Q4_1 || c.type == DType::Q5_1 || c.type == DType::Q4_K || c.type == DType::Q5_K)
                put16(b, k * block + 2, 0x3c00);
        }
        EXPECT_EQ(first_non_finite(c.type, b.data(), b.size()), std::nullopt) << dtype_name(c.type);
        put16(b, block + c.field, f16_nan);
        EXPECT_EQ(first_non_finite(c.type, b.data(), b.size()), 1) << dtype_name(c.type);
    }
}

TEST(HostileInputs, ConfigJsonRopeValuesAreRangeChecked) {
    const json base = json::parse(slurp(testing::generated_checkpoint("tiny", 3, DType::F32) + "/config.json"));
    const auto expect_error = [&](const json& config, const std::string& message) {
        try {
            ModelConfig::from_json_text(config.dump(), "config.json");
            ADD_FAILURE() << "accepted " << config.dump();
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        }
    };
    for (const double bad : {1e-30, 0.5, 1e13}) {
        json c = base;
        c["rope_theta"] = bad;
        expect_error(c, "field 'rope_theta': must be in (1, 1e+12), got ");
    }
    for (const double bad : {1e-38, 1e5}) {
        json c = base;
        c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", bad}};
        expect_error(c, "field 'rope_scaling.factor': must be in (0.001, 10000), got ");
    }
    expect_error(json::parse(R"({"a": )" + nested("[", "1", "]", 1000) + "}"),
                 "config.json: JSON nested deeper than 64 levels (the limit)");
}

// ---- 7. Write failures ----

TEST(HostileInputs, OutputErrorsFailTheCommand) {
    const ModelFolder model;
    expect_refused(model.generate({}, Out::DevFull), "cannot write to standard output: No space left on device");
    expect_refused(model.generate({"--json"}, Out::DevFull), "cannot write to standard output: No space left on device");
    expect_refused(model.generate({}, Out::BrokenPipe), "cannot write to standard output: Broken pipe");

    const TempDir dir;
    write(dir.path() / "case.json", R"({"scores": [[1, 2, 3]], "window_start": [0], "window_end": [3], "topk": 2})");
    expect_refused(run({"dsa-topk", "--input", dir.file("case.json")}, Out::DevFull),
                   "cannot write to standard output: No space left on device");

    const TokenizerFolder folder(tokenizer_json());
    expect_refused(run({"tokenize", "--model", folder.dir.str(), "--text", "hi"}, Out::Closed),
                   "cannot write to standard output: Bad file descriptor");
    // The same commands succeed when the output has somewhere to go.
    const Child ok = run({"tokenize", "--model", folder.dir.str(), "--text", "hi"});
    EXPECT_EQ(ok.code, 0) << ok.err;
    EXPECT_EQ(ok.out, "[0,1]\n");
}

// ---- Shared helpers ----

TEST(HostileInputs, FilesAreCheckedBeforeTheyAreRead) {
    const TempDir dir;
    make_fifo(dir.path() / "fifo");
    fs::create_directory(dir.path() / "sub");
    fs::create_symlink(dir.path() / "nowhere", dir.path() / "dangling");
    EXPECT_EQ(untrusted::describe_path(dir.file("fifo")), "a FIFO");
    EXPECT_EQ(untrusted::describe_path(dir.file("sub")), "a directory");
    EXPECT_EQ(untrusted::describe_path(dir.file("dangling")), "a dangling symbolic link");
    EXPECT_EQ(untrusted::describe_path(dir.file("absent")), "missing");
    EXPECT_EQ(untrusted::describe_path("/dev/null"), "a character device");
    write(dir.path() / "big", std::string(100, 'x'));
    EXPECT_EQ(untrusted::read_regular_file(dir.file("big"), 100), std::string(100, 'x'));
    try {
        untrusted::read_regular_file(dir.file("big"), 99);
        ADD_FAILURE() << "read past the limit";
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), dir.file("big") + ": the file has 100 bytes, over the limit of 99 bytes for this file");
    }
    EXPECT_EQ(untrusted::open_regular_file(dir.file("fifo")).error, "not a regular file: it is a FIFO");
    EXPECT_EQ(untrusted::open_regular_file(dir.file("absent")).error, "cannot open: it does not exist");
}

}  // namespace
}  // namespace tracelm
