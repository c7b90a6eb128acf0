// Tests of the byte-level BPE tokenizer: Qwen3 goldens (ids produced by two independent
// implementations), round trips, streaming detokenization, added-token flags on a small synthetic
// tokenizer whose expected ids were checked against the reference `tokenizers` library, and
// corrupt tokenizer.json files.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tracelm {
namespace {

using nlohmann::json;
using tokenizer_detail::is_valid_utf8;

const std::string kQwenJson = TRACELM_SOURCE_DIR "/models/qwen3-tokenizer/tokenizer.json";
const std::string kGoldenPath = TRACELM_SOURCE_DIR "/testdata/tokenizer/qwen3_encode.jsonl";

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    return std::move(buffer).str();
}

const Tokenizer& qwen() {
    static const Tokenizer tokenizer = Tokenizer::from_file(kQwenJson);
    return tokenizer;
}

struct Golden {
    int line;
    std::string text;
    std::vector<int32_t> ids;
};

const std::vector<Golden>& goldens() {
    static const std::vector<Golden> all = [] {
        std::vector<Golden> out;
        std::istringstream in(read_file(kGoldenPath));
        std::string line;
        for (int number = 1; std::getline(in, line); ++number) {
            if (line.empty()) continue;
            const json j = json::parse(line);
            out.push_back(
                {number, j.at("text").get<std::string>(), j.at("ids").get<std::vector<int32_t>>()});
        }
        return out;
    }();
    return all;
}

std::string show(const std::vector<int32_t>& ids) { return json(ids).dump(); }

std::string encode_then_decode(const Tokenizer& t, const std::string& text) {
    return t.decode(t.encode(text));
}

// A small byte-level tokenizer: ids 0..255 are the single bytes (id == byte value), then
// merges a+b=256, ab+c=257, " "+a=258, a+a=259; added tokens start at 260.
json synthetic_tokenizer(const std::vector<json>& added_tokens = {}) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) {
        vocab[tokenizer_detail::byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
    }
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"a", "b"}, {"ab", "c"}, {"\xC4\xA0", "a"}, {"a", "a"}};  // "\xC4\xA0" is 'Ġ' (space)
    json merge_list = json::array();
    for (const auto& [left, right] : merges) {
        vocab[left + right] = static_cast<int>(vocab.size());
        merge_list.push_back({left, right});
    }
    // The Qwen3 split pattern.
    const std::string regex =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    return {
        {"version", "1.0"},
        {"added_tokens", json(added_tokens)},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", regex}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
    };
}

json added(int id, const std::string& content, json flags = json::object()) {
    json token = {{"id", id},        {"content", content}, {"single_word", false},
                  {"lstrip", false}, {"rstrip", false},    {"normalized", false},
                  {"special", true}};
    token.update(flags);
    return token;
}

Tokenizer load(const json& doc) { return Tokenizer::from_json_text(doc.dump()); }

// ---------------------------------------------------------------------------------------------
// Qwen3

TEST(TokenizerQwen3, VocabularyLookupsMatchQwen3AndOutOfRangeIdsAreEmpty) {
    const Tokenizer& t = qwen();
    EXPECT_EQ(t.vocab_size(), 151669);
    EXPECT_EQ(t.token_id("<|im_end|>"), 151645);
    EXPECT_EQ(t.token_id("<|im_start|>"), 151644);
    EXPECT_EQ(t.token_id("<think>"), 151667);
    EXPECT_TRUE(t.is_special(151645));
    EXPECT_TRUE(t.is_special(151643));
    EXPECT_FALSE(t.is_special(151667));  // <think> is an added but not a special token
    EXPECT_FALSE(t.is_special(9707));
    EXPECT_FALSE(t.is_special(-1));
    EXPECT_FALSE(t.is_special(1 << 30));

    EXPECT_EQ(t.token_text(151645), "<|im_end|>");
    EXPECT_EQ(t.token_text(9707), "Hello");
    EXPECT_EQ(t.token_text(1879), " world");  // stored as "Ġworld"
    EXPECT_EQ(t.token_id(" world"), 1879);
    EXPECT_EQ(t.token_id("Hello"), 9707);
    EXPECT_FALSE(t.token_id("no such token, surely").has_value());
    EXPECT_EQ(t.token_text(-5), "");
    EXPECT_EQ(t.token_text(t.vocab_size()), "");
}

TEST(TokenizerQwen3, SpecialIdsAndTemplateComeFromTokenizerConfigJson) {
    const Tokenizer& t = qwen();
    EXPECT_EQ(t.eos_token_id(), 151645);
    EXPECT_EQ(t.pad_token_id(), 151643);
    EXPECT_FALSE(t.bos_token_id().has_value());
    EXPECT_FALSE(t.add_bos_token());
    EXPECT_NE(t.chat_template().find("<|im_start|>"), std::string::npos);
}

TEST(TokenizerQwen3, LoadsQuickly) {
    const auto start = std::chrono::steady_clock::now();
    const Tokenizer t = Tokenizer::from_file(kQwenJson);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(t.vocab_size(), 151669);
    // About 0.3 s in an optimized build; the bound leaves room for Debug and sanitizer builds.
    EXPECT_LT(seconds, 10.0);
    RecordProperty("load_seconds", std::to_string(seconds));
}

TEST(TokenizerQwen3, EncodesEveryGoldenAsHuggingFaceTokenizersDoes) {
    ASSERT_GT(goldens().size(), 200u);
    for (const Golden& g : goldens()) {
        const std::vector<int32_t> ids = qwen().encode(g.text);
        if (ids != g.ids) {
            FAIL() << "first mismatch at " << kGoldenPath << ":" << g.line
                   << "\n  text:     " << json(g.text).dump() << "\n  expected: " << show(g.ids)
                   << "\n  got:      " << show(ids);
        }
    }
}

TEST(TokenizerQwen3, DecodeOfEncodeIsNfcText) {
    for (const Golden& g : goldens()) {
        EXPECT_EQ(encode_then_decode(qwen(), g.text),
                  tokenizer_detail::unicode_normalize(g.text, tokenizer_detail::NormalForm::NFC))
            << "line " << g.line;
    }
    // NFD input comes back composed.
    EXPECT_EQ(encode_then_decode(qwen(), "cafe\xCC\x81"), "caf\xC3\xA9");
}

TEST(TokenizerQwen3, SpecialTokensInTextAreOneIdAndPartialOnesAreText) {
    const Tokenizer& t = qwen();
    EXPECT_EQ(t.encode("<|im_end|>"), std::vector<int32_t>{151645});
    // Split pieces around a special token are pre-tokenized separately.
    EXPECT_EQ(t.encode("Hi<|im_end|>Hi"), (std::vector<int32_t>{13048, 151645, 13048}));
    // An incomplete special token is ordinary text.
    const std::vector<int32_t> partial = t.encode("<|im_end|");
    EXPECT_EQ(t.decode(partial), "<|im_end|");
    for (int32_t id : partial) EXPECT_FALSE(t.is_special(id));

    const std::vector<int32_t> chat = t.encode("<|im_start|>user\nHi<|im_end|>\n<think>x</think>");
    EXPECT_EQ(t.decode(chat), "<|im_start|>user\nHi<|im_end|>\n<think>x</think>");
    EXPECT_EQ(t.decode(chat, /*skip_special=*/true), "user\nHi\n<think>x</think>");
}

TEST(TokenizerQwen3, InvalidUtf8IsReplacedNotFatal) {
    const Tokenizer& t = qwen();
    const std::string replacement = "\xEF\xBF\xBD";
    EXPECT_EQ(t.encode("a\xFF"
                       "b"),
              t.encode("a" + replacement + "b"));
    EXPECT_EQ(t.encode("x\xE4\xB8"), t.encode("x" + replacement));  // truncated character
    EXPECT_EQ(t.encode("\xED\xA0\x80"), t.encode(replacement + replacement + replacement));
    EXPECT_EQ(t.decode(t.encode("a\xC0\xAF"
                                "b")),
              "a" + replacement + replacement + "b");

    // Every byte value and every short byte pattern: no crash, decode is valid UTF-8.
    std::string all_bytes;
    for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
    EXPECT_TRUE(is_valid_utf8(t.decode(t.encode(all_bytes))));
    uint32_t state = 12345;
    for (int round = 0; round < 300; ++round) {
        std::string junk;
        for (int i = 0; i < 40; ++i) {
            state = state * 1664525u + 1013904223u;
            junk.push_back(static_cast<char>(state >> 24));
        }
        EXPECT_TRUE(is_valid_utf8(t.decode(t.encode(junk))));
    }
}

TEST(TokenizerQwen3, DecodeSkipsIdsThatNameNoToken) {
    const Tokenizer& t = qwen();
    EXPECT_EQ(t.decode({9707, -1, 151936, 1 << 30, 1879}), "Hello world");
    EXPECT_EQ(t.decode({}), "");
}

TEST(TokenizerQwen3, LongInputsAreNotQuadratic) {
    const Tokenizer& t = qwen();
    std::string letters;
    uint32_t state = 7;
    while (letters.size() < 20000) {
        state = state * 1664525u + 1013904223u;
        letters.push_back(static_cast<char>('a' + (state >> 24) % 26));
    }
    const std::vector<std::string> inputs = {
        std::string(20000, 'a'),
        letters,
        std::string(20000, ' ') + "x",
        std::string(20000, '\n'),
        std::string(20000, '7'),
        [] {
            std::string s;
            while (s.size() < 30000) s += "\xE4\xB8\x82";  // a CJK character split over tokens
            return s;
        }(),
    };
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& input : inputs) {
        EXPECT_EQ(encode_then_decode(t, input), input);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Milliseconds when optimized; quadratic merging would take far longer even then.
    EXPECT_LT(seconds, 20.0);
}

TEST(TokenizerQwen3, IsCopyableAndSharesTables) {
    const Tokenizer copy = qwen();
    EXPECT_EQ(copy.encode("Hello, world!"), (std::vector<int32_t>{9707, 11, 1879, 0}));
}

// ---------------------------------------------------------------------------------------------
// Streaming decoder

std::string stream_all(const Tokenizer& t, const std::vector<int32_t>& ids,
                       bool skip_special = false) {
    StreamDecoder decoder(t, skip_special);
    std::string out;
    for (int32_t id : ids) {
        const std::string chunk = decoder.push(id);
        EXPECT_TRUE(is_valid_utf8(chunk)) << "push(" << id << ") returned a partial sequence";
        out += chunk;
    }
    const std::string rest = decoder.flush();
    EXPECT_TRUE(is_valid_utf8(rest));
    return out + rest;
}

TEST(TokenizerStreamDecoder, MatchesDecodeOnGoldens) {
    for (const Golden& g : goldens()) {
        EXPECT_EQ(stream_all(qwen(), g.ids), qwen().decode(g.ids)) << "line " << g.line;
        EXPECT_EQ(stream_all(qwen(), g.ids, true), qwen().decode(g.ids, true)) << "line " << g.line;
    }
}

TEST(TokenizerStreamDecoder, HoldsCharacterSplitAcrossTokens) {
    const Tokenizer& t = qwen();
    // U+4E02 is two tokens: its first two bytes, then its last byte.
    const std::vector<int32_t> cjk = t.encode("\xE4\xB8\x82");
    ASSERT_EQ(cjk.size(), 2u);
    StreamDecoder decoder(t);
    EXPECT_EQ(decoder.push(cjk[0]), "");
    EXPECT_EQ(decoder.push(cjk[1]), "\xE4\xB8\x82");
    EXPECT_EQ(decoder.flush(), "");

    // U+1FAE0 (an emoji) is three tokens.
    const std::string emoji = "\xF0\x9F\xAB\xA0";
    const std::vector<int32_t> ids = t.encode("a" + emoji + "b");
    ASSERT_GE(ids.size(), 4u);
    StreamDecoder d2(t);
    std::vector<std::string> chunks;
    for (int32_t id : ids) chunks.push_back(d2.push(id));
    EXPECT_EQ(chunks.front(), "a");
    std::string joined;
    for (const std::string& c : chunks) joined += c;
    EXPECT_EQ(joined, "a" + emoji + "b");
    EXPECT_EQ(d2.flush(), "");
}

TEST(TokenizerStreamDecoder, InvalidSequencesBecomeReplacementOnceCertain) {
    const Tokenizer& t = qwen();
    const std::string replacement = "\xEF\xBF\xBD";
    const int32_t lead = t.token_id("\xE4").value();  // a 3-byte lead, alone
    const int32_t cont = t.token_id("\x80").value();  // a lone continuation byte
    const int32_t letter = t.token_id("A").value();

    StreamDecoder d(t);
    EXPECT_EQ(d.push(cont), replacement);  // can never become valid
    EXPECT_EQ(d.push(lead), "");           // might still complete
    EXPECT_EQ(d.push(letter), replacement + "A");
    EXPECT_EQ(d.push(lead), "");
    EXPECT_EQ(d.flush(), replacement);  // cut off at the end
    EXPECT_EQ(d.flush(), "");
    EXPECT_EQ(d.push(-7), "");  // unknown ids are skipped, as in decode()
}

TEST(TokenizerStreamDecoder, SkipSpecialDropsOnlySpecialTokens) {
    const Tokenizer& t = qwen();
    const std::vector<int32_t> ids = t.encode("Hi<|im_end|><think>");
    EXPECT_EQ(stream_all(t, ids, /*skip_special=*/true), "Hi<think>");
    EXPECT_EQ(stream_all(t, ids), "Hi<|im_end|><think>");
}

// ---------------------------------------------------------------------------------------------
// Synthetic tokenizer: BPE rules and added-token flags (expected ids checked with `tokenizers`)

TEST(TokenizerBpe, MergesGoByRankThenLeftmostFirst) {
    const Tokenizer t = load(synthetic_tokenizer());
    EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{259, 'a'}));  // leftmost pair first
    EXPECT_EQ(t.encode("aaaa"), (std::vector<int32_t>{259, 259}));
    EXPECT_EQ(t.encode("aab"), (std::vector<int32_t>{'a', 256}));  // a+b outranks a+a
    EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{257}));
    EXPECT_EQ(t.encode(" abc"), (std::vector<int32_t>{' ', 257}));
    EXPECT_EQ(t.encode("a b"), (std::vector<int32_t>{'a', ' ', 'b'}));
    EXPECT_EQ(t.vocab_size(), 260);
}

TEST(TokenizerBpe, LegacyMergeStringsAreEquivalent) {
    json doc = synthetic_tokenizer();
    json legacy = json::array();
    for (const json& pair : doc["model"]["merges"]) {
        legacy.push_back(pair[0].get<std::string>() + " " + pair[1].get<std::string>());
    }
    doc["model"]["merges"] = legacy;
    const Tokenizer t = load(doc);
    EXPECT_EQ(t.encode("aab abc aaa"), load(synthetic_tokenizer()).encode("aab abc aaa"));
}

TEST(TokenizerBpe, IgnoreMergesUsesWholeWordTokens) {
    json doc = synthetic_tokenizer();
    doc["model"]["vocab"]["xyz"] = 260;
    EXPECT_EQ(load(doc).encode("xyz"), (std::vector<int32_t>{'x', 'y', 'z'}));
    doc["model"]["ignore_merges"] = true;
    EXPECT_EQ(load(doc).encode("xyz"), (std::vector<int32_t>{260}));
}

// A SentencePiece-style tokenizer.json (the shape of Gemma's and Llama 2's): spaces replaced by "▁", no
// pre-tokenizer, BPE over characters with byte fallback, and a decoder that undoes both.
json sentencepiece_style_tokenizer() {
    const json vocab = {{"<unk>", 0}, {"<0xC3>", 1}, {"<0xA9>", 2}, {"\u2581", 3}, {"a", 4},
                        {"b", 5},     {"\u2581a", 6}, {"ab", 7},     {"\u2581ab", 8}};
    const json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
    const json restore_space = {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}};
    return {
        {"version", "1.0"},
        {"normalizer", replace_space},
        {"pre_tokenizer", nullptr},
        {"decoder",
         {{"type", "Sequence"}, {"decoders", {restore_space, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}},
        {"model",
         {{"type", "BPE"},
          {"vocab", vocab},
          {"merges",
           json::array({json::array({"\u2581", "a"}), json::array({"a", "b"}), json::array({"\u2581a", "b"})})},
          {"unk_token", "<unk>"},
          {"fuse_unk", true},
          {"byte_fallback", true}}},
    };
}

TEST(TokenizerSentencePieceBpe, CharactersMergeByRankWithByteFallbackAndFusedUnknowns) {
    const Tokenizer t = load(sentencepiece_style_tokenizer());
    // "▁a" (rank 0) before "ab" (rank 1), then "▁a" + "b" (rank 2).
    EXPECT_EQ(t.encode(" ab"), (std::vector<int32_t>{8}));
    EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{7}));
    // No token for "é": its two bytes' tokens. No token and no byte tokens for "z": one <unk> per run.
    EXPECT_EQ(t.encode("\xC3\xA9"), (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(t.encode("azzb"), (std::vector<int32_t>{4, 0, 5}));
    EXPECT_EQ(t.decode({8, 1, 2, 3}), " ab\xC3\xA9 ");
    EXPECT_EQ(t.token_id(" a"), 6);
    EXPECT_EQ(t.token_text(6), " a");
}

TEST(TokenizerAddedTokens, LstripSwallowsTheWhitespaceBefore) {
    const Tokenizer t = load(synthetic_tokenizer({added(260, "<m>", {{"lstrip", true}})}));
    EXPECT_EQ(t.encode("x <m> y"), (std::vector<int32_t>{'x', 260, ' ', 'y'}));
    EXPECT_EQ(t.encode("x  \t<m>"), (std::vector<int32_t>{'x', 260}));
    EXPECT_EQ(t.encode("<m>  <m>"), (std::vector<int32_t>{260, 260}));
    EXPECT_EQ(t.encode(" <m>"), (std::vector<int32_t>{260}));
}

TEST(TokenizerAddedTokens, RstripSwallowsTheWhitespaceAfter) {
    const Tokenizer t = load(synthetic_tokenizer({added(260, "<m>", {{"rstrip", true}})}));
    EXPECT_EQ(t.encode("x <m>  y"), (std::vector<int32_t>{'x', ' ', 260, 'y'}));
    EXPECT_EQ(t.encode("<m>  <m>"), (std::vector<int32_t>{260, 260}));
    EXPECT_EQ(t.encode("<m>\xE3\x80\x80\n"), (std::vector<int32_t>{260}));  // U+3000 too
    const Tokenizer both =
        load(synthetic_tokenizer({added(260, "<m>", {{"lstrip", true}, {"rstrip", true}})}));
    EXPECT_EQ(both.encode("a  <m>  <m>  b"), (std::vector<int32_t>{'a', 260, 260, 'b'}));
}

TEST(TokenizerAddedTokens, SingleWordMatchesOnlyAWholeWord) {
    const Tokenizer t = load(synthetic_tokenizer({added(260, "zz", {{"single_word", true}})}));
    const std::vector<int32_t> plain = {'z', 'z'};
    EXPECT_EQ(t.encode("zz"), std::vector<int32_t>{260});
    EXPECT_EQ(t.encode("xzz"), (std::vector<int32_t>{'x', 'z', 'z'}));
    EXPECT_EQ(t.encode("zz x"), (std::vector<int32_t>{260, ' ', 'x'}));
    EXPECT_EQ(t.encode("x zz."), (std::vector<int32_t>{'x', ' ', 260, '.'}));
    EXPECT_EQ(t.encode("_zz"), (std::vector<int32_t>{'_', 'z', 'z'}));
    EXPECT_EQ(t.encode("zz\xC3\xA9"), (std::vector<int32_t>{'z', 'z', 0xC3, 0xA9}));
    EXPECT_EQ(t.encode("zz1"), (std::vector<int32_t>{'z', 'z', '1'}));
    EXPECT_EQ(t.encode("(zz)"), (std::vector<int32_t>{'(', 260, ')'}));
}

TEST(TokenizerAddedTokens, TheLongestAddedTokenMatchesFirst) {
    const Tokenizer t = load(synthetic_tokenizer({added(260, "<a>"), added(261, "<a><b>")}));
    EXPECT_EQ(t.encode("<a><b>"), std::vector<int32_t>{261});
    EXPECT_EQ(t.encode("<a><c>"), (std::vector<int32_t>{260, '<', 'c', '>'}));
    EXPECT_EQ(t.encode("<a<a><b><a>"), (std::vector<int32_t>{'<', 'a', 261, 260}));
}

TEST(TokenizerAddedTokens, OnlyNormalizedTokensMatchTextThatNormalizesToThem) {
    const std::string nfd = "e\xCC\x81!";  // e + COMBINING ACUTE, then '!'
    const std::string nfc = "\xC3\xA9!";
    const Tokenizer normalized =
        load(synthetic_tokenizer({added(260, nfc, {{"normalized", true}, {"special", false}})}));
    EXPECT_EQ(normalized.encode(nfd), std::vector<int32_t>{260});
    EXPECT_EQ(normalized.encode("x" + nfc), (std::vector<int32_t>{'x', 260}));
    const Tokenizer raw = load(synthetic_tokenizer({added(260, nfc, {{"special", false}})}));
    EXPECT_EQ(raw.encode(nfd), (std::vector<int32_t>{0xC3, 0xA9, '!'}));
    EXPECT_EQ(raw.encode(nfc), std::vector<int32_t>{260});
}

// ---------------------------------------------------------------------------------------------
// Corrupt or unsupported files

void expect_tokenizer_load_error(const std::string& text, const std::string& fragment,
                       const std::string& config = "") {
    try {
        Tokenizer::from_json_text(text, config);
        ADD_FAILURE() << "no exception; expected one mentioning \"" << fragment << "\"";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
            << "message: " << e.what();
    }
}

TEST(TokenizerCorruptJson, TruncatedQwenFileThrows) {
    const std::string text = read_file(kQwenJson);
    for (size_t keep : {size_t{0}, size_t{1}, size_t{20}, size_t{5000}, text.size() / 3,
                        text.size() / 2, text.size() - 100, text.size() - 2}) {
        SCOPED_TRACE("kept " + std::to_string(keep) + " bytes");
        EXPECT_THROW(Tokenizer::from_json_text(text.substr(0, keep)), std::runtime_error);
    }
}

TEST(TokenizerCorruptJson, ADocumentThatIsNotATokenizerIsRefused) {
    expect_tokenizer_load_error("", "invalid JSON");
    expect_tokenizer_load_error("garbage", "invalid JSON");
    expect_tokenizer_load_error("null", "must be a JSON object");
    expect_tokenizer_load_error("[1, 2]", "must be a JSON object");
    expect_tokenizer_load_error("{}", "model is missing");
}

TEST(TokenizerCorruptJson, EveryModelProblemIsRefusedNamingIt) {
    const json good = synthetic_tokenizer();
    const auto variant = [&](auto edit) {
        json doc = good;
        edit(doc);
        return doc.dump();
    };
    expect_tokenizer_load_error(variant([](json& d) { d.erase("model"); }), "model is missing");
    expect_tokenizer_load_error(variant([](json& d) { d["model"] = json::array(); }),
                      "model must be a JSON object");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["type"] = "WordPiece"; }), "WordPiece");
    expect_tokenizer_load_error(variant([](json& d) { d["model"].erase("vocab"); }), "vocab is missing");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["vocab"] = json::array(); }),
                      "model.vocab must be an object");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["vocab"]["a"] = "97"; }),
                      "is not an integer id");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["vocab"]["a"] = -1; }), "negative");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["vocab"]["a"] = 1.5; }),
                      "is not an integer id");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["vocab"]["a"] = 1LL << 40; }),
                      "does not fit");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["vocab"]["big"] = 1 << 30; }), "far beyond");
    expect_tokenizer_load_error(variant([](json& d) { d["model"].erase("merges"); }), "merges is missing");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["merges"] = "a b"; }),
                      "merges must be an array");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["model"]["merges"].push_back({"a", "nope"});
                      }),
                      "references unknown token \"nope\"");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["model"]["merges"].push_back({"x", "q"});
                      }),
                      "references unknown token \"xq\"");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["model"]["merges"].push_back({"a", "b", "c"});
                      }),
                      "more than two tokens");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["merges"].push_back({"a"}); }),
                      "does not have two tokens");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["merges"].push_back(7); }),
                      "not a pair of token strings");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["merges"].push_back("a b c"); }),
                      "not of the form");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["unk_token"] = "<unk>"; }), "unk_token");
    expect_tokenizer_load_error(variant([](json& d) { d["model"]["continuing_subword_prefix"] = "##"; }),
                      "continuing_subword_prefix");
}

TEST(TokenizerCorruptJson, EveryPipelineProblemIsRefusedNamingIt) {
    const json good = synthetic_tokenizer();
    const auto variant = [&](auto edit) {
        json doc = good;
        edit(doc);
        return doc.dump();
    };
    expect_tokenizer_load_error(variant([](json& d) {
                          d["added_tokens"] = {{{"id", 260}}};
                      }),
                      "added_tokens[0].content is missing");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["added_tokens"] = {{{"id", "7"}, {"content", "x"}}};
                      }),
                      "added_tokens[0].id must be a token id");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["added_tokens"] = {added(260, "x", {{"lstrip", 1}})};
                      }),
                      "lstrip must be true or false");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["normalizer"] = {{"type", "Lowercase"}};
                      }),
                      "Lowercase");
    expect_tokenizer_load_error(
        variant([](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; }),
        "cannot compile pre-tokenizer regex");
    expect_tokenizer_load_error(
        variant([](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; }),
        "Sideways");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["pre_tokenizer"] = {{"type", "Whitespace"}};
                      }),
                      "Whitespace");
    expect_tokenizer_load_error(variant([](json& d) { d.erase("pre_tokenizer"); }), "no ByteLevel step");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["decoder"] = sentencepiece_style_tokenizer()["decoder"];
                      }),
                      "pre_tokenizer has a ByteLevel step but the decoder is not ByteLevel");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "_"}};
                      }),
                      "normalizer.pattern must be a non-empty String");
    expect_tokenizer_load_error(variant([](json& d) {
                          const json step = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "b"}};
                          d["normalizer"] = {{"type", "Sequence"}, {"normalizers", json(std::vector<json>(65, step))}};
                      }),
                      "normalizer.normalizers[64].type is one step too many");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Strip"}}}}};
                      }),
                      "decoder.decoders[0].type \"Strip\" is not supported");
    expect_tokenizer_load_error(variant([](json& d) { d.erase("decoder"); }), "decoder is missing");
    expect_tokenizer_load_error(variant([](json& d) {
                          d["decoder"] = {{"type", "WordPiece"}};
                      }),
                      "decoder.type");
}

TEST(TokenizerCorruptJson, RandomMutationsLoadOrThrowRuntimeError) {
    const std::string good =
        synthetic_tokenizer({added(260, "<m>", {{"lstrip", true}, {"single_word", true}})}).dump();
    uint32_t state = 2024;
    const auto next = [&](uint32_t bound) {
        state = state * 1664525u + 1013904223u;
        return (state >> 8) % bound;
    };
    static const char kAlphabet[] = "{}[]\",:0123456789-.eE tnfalsru\\x";
    for (int round = 0; round < 400; ++round) {
        std::string text = good;
        for (uint32_t edits = 1 + next(4); edits > 0; --edits) {
            const size_t pos = next(static_cast<uint32_t>(text.size()));
            const char c = kAlphabet[next(sizeof kAlphabet - 1)];
            switch (next(3)) {
                case 0:
                    text[pos] = c;
                    break;
                case 1:
                    text.insert(pos, 1, c);
                    break;
                default:
                    text.erase(pos, 1 + next(8));
                    break;
            }
        }
        try {
            const Tokenizer t = Tokenizer::from_json_text(text);
            EXPECT_TRUE(is_valid_utf8(t.decode(t.encode("ab <m> c\xFF\n"))));
        } catch (const std::runtime_error&) {
            // The expected outcome for most mutations.
        } catch (const std::exception& e) {
            ADD_FAILURE() << "round " << round << ": " << typeid(e).name() << ": " << e.what();
        }
    }
}

TEST(TokenizerCorruptJson, ConfigEosIsReadInBothFormsAndBadConfigsAreRefused) {
    const std::string doc = synthetic_tokenizer({added(260, "<eos>")}).dump();
    EXPECT_EQ(Tokenizer::from_json_text(doc, R"({"eos_token": "<eos>"})").eos_token_id(), 260);
    EXPECT_EQ(
        Tokenizer::from_json_text(doc, R"({"eos_token": {"content": "<eos>"}})").eos_token_id(),
        260);
    expect_tokenizer_load_error(doc, "tokenizer_config.json: invalid JSON", "{");
    expect_tokenizer_load_error(doc, "not a token", R"({"eos_token": "<nope>"})");
    expect_tokenizer_load_error(doc, "add_bos_token must be true or false", R"({"add_bos_token": "yes"})");
}

TEST(TokenizerCorruptJson, AMissingFileIsNamedAndAFolderRefused) {
    try {
        Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
        FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tokenizer.json"), std::string::npos);
    }
    EXPECT_THROW(Tokenizer::from_file(TRACELM_SOURCE_DIR "/models"), std::runtime_error);
}

// ---------------------------------------------------------------------------------------------
// Helpers

TEST(TokenizerUtf8, LossyConversionUsesMaximalSubparts) {
    using tokenizer_detail::to_valid_utf8;
    const std::string r = "\xEF\xBF\xBD";
    // Expected results are Python's bytes.decode("utf-8", "replace").
    EXPECT_EQ(to_valid_utf8("\xF0\x9F\x98"), r);
    EXPECT_EQ(to_valid_utf8("\xE0\x80"), r + r);
    EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), r + r + r);
    EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), r + r + r + r);
    EXPECT_EQ(to_valid_utf8("\xC0\xAF"), r + r);
    EXPECT_EQ(to_valid_utf8("\xE4\xB8"
                            "A"),
              r + "A");
    EXPECT_EQ(to_valid_utf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
    EXPECT_EQ(to_valid_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(TokenizerUtf8, ByteLevelMappingRoundTrips) {
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    const std::string mapped = tokenizer_detail::byte_level_encode(all);
    EXPECT_TRUE(is_valid_utf8(mapped));
    EXPECT_EQ(tokenizer_detail::byte_level_encode(" "), "\xC4\xA0");  // 'Ġ'
    EXPECT_EQ(tokenizer_detail::byte_level_decode(mapped), all);
    EXPECT_FALSE(tokenizer_detail::byte_level_decode(" ").has_value());  // not in the alphabet
}

TEST(TokenizerPreTokenizer, SplitBehaviorsMatchReference) {
    using tokenizer_detail::PreTokenizer;
    using tokenizer_detail::SplitBehavior;
    using Pieces = std::vector<std::string>;
    struct Case {
        SplitBehavior behavior;
        bool invert;
        Pieces regex_pieces;    // pattern "-+" on "a-b--c---"
        Pieces literal_pieces;  // literal "-" on "-a-b--c"
    };
    // Expected pieces are those of the reference library's Split pre-tokenizer.
    const std::vector<Case> cases = {
        {SplitBehavior::Removed, false, {"a", "b", "c"}, {"a", "b", "c"}},
        {SplitBehavior::Removed, true, {"-", "--", "---"}, {"-", "-", "-", "-"}},
        {SplitBehavior::Isolated,
         false,
         {"a", "-", "b", "--", "c", "---"},
         {"-", "a", "-", "b", "-", "-", "c"}},
        {SplitBehavior::MergedWithPrevious,
         false,
         {"a-", "b--", "c---"},
         {"-", "a-", "b-", "-", "c"}},
        {SplitBehavior::MergedWithPrevious,
         true,
         {"a", "-b", "--c", "---"},
         {"-a", "-b", "-", "-c"}},
        {SplitBehavior::MergedWithNext, false, {"a", "-b", "--c", "---"}, {"-a", "-b", "-", "-c"}},
        {SplitBehavior::MergedWithNext, true, {"a-", "b--", "c---"}, {"-", "a-", "b-", "-", "c"}},
        {SplitBehavior::Contiguous,
         false,
         {"a", "-", "b", "--", "c", "---"},
         {"-", "a", "-", "b", "--", "c"}},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(static_cast<int>(c.behavior) * 2 + (c.invert ? 1 : 0));
        PreTokenizer regex;
        regex.add_split("-+", false, c.behavior, c.invert);
        EXPECT_EQ(regex.split("a-b--c---"), c.regex_pieces);
        PreTokenizer literal;
        literal.add_split("-", true, c.behavior, c.invert);
        EXPECT_EQ(literal.split("-a-b--c"), c.literal_pieces);
    }

    // ByteLevel's prefix space goes on every piece that lacks one, before its own regex runs.
    PreTokenizer gpt2;
    gpt2.add_byte_level(/*add_prefix_space=*/true, /*use_regex=*/true);
    EXPECT_EQ(gpt2.split("hello world  x"), (Pieces{" hello", " world", " ", " x"}));
    PreTokenizer split_then_prefix;
    split_then_prefix.add_split(" ", true, SplitBehavior::Isolated, false);
    split_then_prefix.add_byte_level(/*add_prefix_space=*/true, /*use_regex=*/false);
    EXPECT_EQ(split_then_prefix.split("hello world  x"),
              (Pieces{" hello", " ", " world", " ", " ", " x"}));
}

TEST(TokenizerPreTokenizer, BackslashSBecomesOnigurumasWhitespaceClass) {
    using tokenizer_detail::oniguruma_compatible_pattern;
    const std::string ws =
        R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
    EXPECT_EQ(oniguruma_compatible_pattern(R"(\s+(?!\S))"), "[" + ws + "]+(?![^" + ws + "])");
    EXPECT_EQ(oniguruma_compatible_pattern(R"([^\s\p{L}])"), "[^" + ws + R"(\p{L}])");
    EXPECT_EQ(oniguruma_compatible_pattern(R"(\\s\Q\s\E[]\s][[:alpha:]\s])"),
              R"(\\s\Q\s\E[])" + ws + "][[:alpha:]" + ws + "]");
    // U+180E is not white space for Oniguruma (nor Unicode), so it joins the punctuation run.
    const tokenizer_detail::Regex re(oniguruma_compatible_pattern(R"( ?[^\s\p{L}\p{N}]+|\s+)"),
                                     false);
    const auto matches = re.find_all("\xE1\xA0\x8E'");
    ASSERT_EQ(matches.size(), 1u);
    EXPECT_EQ(matches[0], (std::pair<size_t, size_t>{0, 4}));
}

}  // namespace
}  // namespace tracelm
