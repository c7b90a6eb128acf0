// Gemma 3's SentencePiece vocabulary (262,144 tokens, byte fallback, no space prefix, user-defined whitespace runs
// and HTML tags, control tokens) from the Gemma 3 270M GGUF, against llama.cpp (goldens from
// scripts/make_llamacpp_goldens.py gemma3): every line of a multilingual corpus with parse_special on and off, the
// greedy goldens' prompts with BOS, the vocabulary facts and end-of-generation ids; and the load and encode speed.
// The same vocabulary as Hugging Face's tokenizer.json (a BPE model with byte fallback, as transformers converts
// the GGUF; rebuilt by support/gemma3_tokenizer_json.h) against Hugging Face `tokenizers` on the same corpus
// (goldens from scripts/make_hf_gemma3_tokenizer_goldens.py).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "formats/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "support/gemma3_tokenizer_json.h"
#include "support/test_support.h"
#include "support/tokenizer_goldens.h"
#include "tokenizer/tokenizer.h"

namespace tracelm {
namespace {

using nlohmann::json;
using testing::read_json;
using testing::read_jsonl;
using testing::repo_path;

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The tokenizers are loaded once per test process; TokenizerSpeedGemma3 reports how long that took.
struct Loaded {
    Tokenizer tokenizer;
    double load_ms;
};

const Loaded& gemma3_loaded() {
    static const Loaded loaded = [] {
        const auto start = Clock::now();
        Tokenizer tok = Tokenizer::from_gguf(GgufFile(testing::gemma3_gguf_path()));
        return Loaded{std::move(tok), ms_since(start)};
    }();
    return loaded;
}

const Tokenizer& gemma3() { return gemma3_loaded().tokenizer; }

std::vector<json> gemma3_goldens() { return read_jsonl(repo_path("testdata/goldens/gemma3_tokenize.jsonl")); }

TEST(GgufTokenizerGemma3, MatchesLlamaCppOnEveryGolden) {
    TRACELM_NEED_GEMMA3();
    testing::expect_goldens(gemma3_goldens(), [](const json&) -> const Tokenizer& { return gemma3(); });
}

TEST(GgufTokenizerGemma3, GreedyPromptsWithBosAreLlamaCppsPromptIds) {
    TRACELM_NEED_GEMMA3();
    const json goldens = read_json(repo_path("testdata/goldens/gemma3_greedy.json"));
    ASSERT_TRUE(gemma3().add_bos_token());
    for (const json& record : goldens.at("records")) {
        std::vector<int32_t> ids = {gemma3().bos_token_id().value()};
        const auto text = gemma3().encode(record.at("prompt").get<std::string>());
        ids.insert(ids.end(), text.begin(), text.end());
        EXPECT_EQ(ids, record.at("prompt_ids").get<std::vector<int32_t>>()) << record.at("prompt").dump();
    }
}

TEST(GgufTokenizerGemma3, ReadsVocabularyAndEndOfGenerationAsLlamaCppDoes) {
    TRACELM_NEED_GEMMA3();
    const Tokenizer& tok = gemma3();
    testing::expect_vocab_facts(tok, read_json(repo_path("testdata/goldens/gemma3_vocab.json")));

    // <end_of_turn> ends a turn; llama.cpp also stops on the HTML tag </s> (user-defined in the file), which it
    // makes a control token: written in the text, it is one id only when special tokens are parsed.
    const int32_t end_of_turn = tok.token_id("<end_of_turn>").value();
    const int32_t s_close = tok.token_id("</s>").value();
    EXPECT_TRUE(tok.is_end_of_generation(end_of_turn));
    EXPECT_TRUE(tok.is_end_of_generation(s_close));
    EXPECT_TRUE(tok.is_special(s_close));
    EXPECT_EQ(tok.encode("</s>", true), std::vector<int32_t>{s_close});
    EXPECT_GT(tok.encode("</s>", false).size(), 1u);
    // Other HTML tags and whitespace runs stay user-defined: one id whatever parse_special says.
    EXPECT_EQ(tok.encode("<td>", false).size(), 1u);
    EXPECT_EQ(tok.encode(std::string(31, ' '), false).size(), 1u);
    EXPECT_FALSE(tok.is_special(tok.token_id("<td>").value()));
    EXPECT_EQ(tok.decode(tok.encode("<start_of_turn>user\nHi<end_of_turn>\n"), /*skip_special=*/true), "user\nHi\n");
}

TEST(GgufTokenizerGemma3, DecodeOfEncodeIsTheTextAndStreamingMatchesDecode) {
    TRACELM_NEED_GEMMA3();
    testing::expect_round_trips(gemma3(), gemma3_goldens());
}

const testing::RebuiltTokenizerJson& rebuilt_tokenizer_json() {
    static const testing::RebuiltTokenizerJson rebuilt = testing::rebuild_gemma3_tokenizer_json(
        read_gguf_vocab(GgufFile(testing::gemma3_gguf_path())),
        read_json(repo_path("testdata/tokenizer/gemma3_tokenizer_json_recipe.json")));
    return rebuilt;
}

const Loaded& gemma3_json_loaded() {
    static const Loaded loaded = [] {
        const std::string& text = rebuilt_tokenizer_json().text;
        const auto start = Clock::now();
        Tokenizer tok = Tokenizer::from_json_text(text);
        return Loaded{std::move(tok), ms_since(start)};
    }();
    return loaded;
}

const Tokenizer& gemma3_json() { return gemma3_json_loaded().tokenizer; }

TEST(TokenizerJsonGemma3, RebuiltFileHasTheContentTransformersWrote) {
    TRACELM_NEED_GEMMA3();
    const json recipe = read_json(repo_path("testdata/tokenizer/gemma3_tokenizer_json_recipe.json"));
    for (const char* part : {"vocab", "merges", "added_tokens"}) {
        EXPECT_EQ(rebuilt_tokenizer_json().sha256.at(part), recipe.at("sha256").at(part).get<std::string>()) << part;
    }
}

TEST(TokenizerJsonGemma3, MatchesHuggingFaceTokenizersOnEveryGolden) {
    TRACELM_NEED_GEMMA3();
    testing::expect_goldens(read_jsonl(repo_path("testdata/goldens/gemma3_hf_tokenize.jsonl")),
                            [](const json&) -> const Tokenizer& { return gemma3_json(); });
}

TEST(TokenizerJsonGemma3, DecodeOfEncodeIsTheTextAndTokensAreFoundByText) {
    TRACELM_NEED_GEMMA3();
    const Tokenizer& tok = gemma3_json();
    testing::expect_round_trips(tok, read_jsonl(repo_path("testdata/goldens/gemma3_hf_tokenize.jsonl")));
    // Spaces are spelled "▁" in this vocabulary; ids agree with the GGUF's.
    EXPECT_EQ(tok.token_id(" world"), gemma3().token_id(" world"));
    EXPECT_EQ(tok.token_text(tok.token_id(" world").value()), " world");
    EXPECT_EQ(tok.token_id("<end_of_turn>"), gemma3().token_id("<end_of_turn>"));
    EXPECT_EQ(tok.decode({tok.token_id("<0xF0>").value(), tok.token_id("<0x9F>").value(),
                          tok.token_id("<0x98>").value(), tok.token_id("<0x80>").value()}),
              "\xF0\x9F\x98\x80");
    EXPECT_TRUE(tok.is_end_of_generation(tok.token_id("<end_of_turn>").value()));
}

// Loading the 262k vocabulary (from the GGUF; from the 33 MB tokenizer.json) and encoding ~10 KB of multilingual
// text (the golden corpus's longest line) stay quick; the times are printed (docs/testing.md quotes them). The
// bounds leave room for sanitizer builds.
TEST(TokenizerSpeedGemma3, LoadsAndEncodesQuickly) {
    TRACELM_NEED_GEMMA3();
    std::string text;
    for (const json& line : gemma3_goldens()) {
        if (line.at("text").get<std::string>().size() > text.size()) text = line.at("text").get<std::string>();
    }
    ASSERT_GT(text.size(), 10000u);
    for (const auto& [what, loaded] : {std::pair{"GGUF (file opened, vocabulary read)", &gemma3_loaded()},
                                       std::pair{"tokenizer.json (parsed from memory)", &gemma3_json_loaded()}}) {
        size_t tokens = 0;
        constexpr int kRounds = 20;
        const auto start = Clock::now();
        for (int i = 0; i < kRounds; ++i) tokens += loaded->tokenizer.encode(text).size();
        const double encode_ms = ms_since(start) / kRounds;
        std::printf("gemma3 %s: loaded in %.1f ms; %zu bytes -> %zu tokens in %.2f ms (%.1f MB/s)\n", what,
                    loaded->load_ms, text.size(), tokens / kRounds, encode_ms,
                    static_cast<double>(text.size()) / encode_ms / 1000.0);
        EXPECT_LT(loaded->load_ms, 10000.0) << what;
        EXPECT_LT(encode_ms, 100.0) << what;
    }
}

}  // namespace
}  // namespace tracelm
