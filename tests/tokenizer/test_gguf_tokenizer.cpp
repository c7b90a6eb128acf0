// Tests of the tokenizers built from GGUF metadata, against llama.cpp (goldens made by
// scripts/make_llamacpp_goldens.py with llama-cpp-python): SmolLM2's byte-level BPE ("gpt2",
// pre-tokenizer "smollm") from the real GGUF, the same vocabulary under the other supported
// pre-tokenizers, and three small hand-written vocabularies: byte-level BPE in
// testdata/tokenizer/tiny_bpe.gguf (under every pre-tokenizer), SentencePiece ("llama") in
// testdata/tokenizer/tiny_spm.gguf, and tokens llama.cpp treats by their text in tiny_roles.gguf. Gemma 3's
// vocabulary: test_gemma3_tokenizer.cpp.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "support/test_support.h"
#include "support/tokenizer_goldens.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace tracelm {
namespace {

using nlohmann::json;
using testing::expect_goldens;
using testing::read_json;
using testing::read_jsonl;
using testing::repo_path;

const GgufVocab& smollm2_vocab() {
    static const GgufVocab vocab = read_gguf_vocab(GgufFile(testing::smollm2_gguf_path()));
    return vocab;
}

const Tokenizer& smollm2() {
    static const Tokenizer tokenizer = Tokenizer::from_gguf(GgufFile(testing::smollm2_gguf_path()));
    return tokenizer;
}

std::string spm_path() { return repo_path("testdata/tokenizer/tiny_spm.gguf"); }

const Tokenizer& tiny_spm() {
    static const Tokenizer tokenizer = Tokenizer::from_gguf(GgufFile(spm_path()));
    return tokenizer;
}

TEST(GgufTokenizerSmolLM2, MatchesLlamaCppOnEveryGolden) {
    TRACELM_NEED_SMOLLM2();
    const auto lines = read_jsonl(repo_path("testdata/goldens/smollm2_tokenize.jsonl"));
    expect_goldens(lines, [](const json&) -> const Tokenizer& { return smollm2(); });
}

TEST(GgufTokenizerSmolLM2, DecodeOfEncodeIsTheTextAndStreamingMatchesDecode) {
    TRACELM_NEED_SMOLLM2();
    testing::expect_round_trips(smollm2(), read_jsonl(repo_path("testdata/goldens/smollm2_tokenize.jsonl")));
}

// Golden lines that name their pre-tokenizer ("pre"), encoded with `vocab` under that name.
void expect_goldens_by_pre(const GgufVocab& vocab, const std::string& golden_path) {
    std::map<std::string, Tokenizer> by_pre;
    expect_goldens(read_jsonl(golden_path), [&](const json& line) -> const Tokenizer& {
        const std::string pre = line.at("pre").get<std::string>();
        auto it = by_pre.find(pre);
        if (it == by_pre.end()) {
            GgufVocab renamed = vocab;
            renamed.pre = pre;
            it = by_pre.emplace(pre, Tokenizer::from_gguf_vocab(renamed)).first;
        }
        return it->second;
    });
}

TEST(GgufTokenizerSmolLM2, OtherPreTokenizersMatchLlamaCpp) {
    TRACELM_NEED_SMOLLM2();
    expect_goldens_by_pre(smollm2_vocab(), repo_path("testdata/goldens/gguf_pre_tokenize.jsonl"));
}

TEST(GgufTokenizerSmolLM2, ReadsVocabularyAndEndOfGenerationAsLlamaCppDoes) {
    TRACELM_NEED_SMOLLM2();
    const Tokenizer& tok = smollm2();
    testing::expect_vocab_facts(tok, read_json(repo_path("testdata/goldens/smollm2_vocab.json")));

    // SmolLM2's chat tokens: <|im_start|> is BOS and <|im_end|> EOS.
    EXPECT_EQ(tok.token_id("<|im_start|>"), 1);
    EXPECT_EQ(tok.token_id("<|im_end|>"), 2);
    EXPECT_TRUE(tok.is_end_of_generation(2));
    EXPECT_FALSE(tok.is_end_of_generation(1));
    EXPECT_TRUE(tok.is_special(2));
    EXPECT_EQ(tok.decode({1, 2}, /*skip_special=*/true), "");
    EXPECT_EQ(tok.token_text(2), "<|im_end|>");
    EXPECT_EQ(tok.token_id(" world"), tok.encode(" world").at(0));
    EXPECT_NE(tok.chat_template().find("<|im_start|>"), std::string::npos);
}

TEST(GgufTokenizerSmolLM2, ParseSpecialOnlyChangesControlTokens) {
    TRACELM_NEED_SMOLLM2();
    const Tokenizer& tok = smollm2();
    const std::string text = "<|im_start|>user\nHi<|im_end|>\n";
    const auto parsed = tok.encode(text, true);
    const auto plain = tok.encode(text, false);
    EXPECT_EQ(parsed.front(), 1);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
    EXPECT_EQ(tok.decode(parsed), tok.decode(plain));
}

// A small vocabulary whose merges make digit grouping and ignore_merges visible in the ids.
TEST(GgufTokenizerBpe, EveryPreTokenizerMatchesLlamaCpp) {
    expect_goldens_by_pre(read_gguf_vocab(GgufFile(repo_path("testdata/tokenizer/tiny_bpe.gguf"))),
                          repo_path("testdata/goldens/tiny_bpe_tokenize.jsonl"));
}

TEST(GgufTokenizerSpm, MatchesLlamaCppOnEveryGolden) {
    const auto lines = read_jsonl(repo_path("testdata/goldens/tiny_spm_tokenize.jsonl"));
    expect_goldens(lines, [](const json&) -> const Tokenizer& { return tiny_spm(); });
}

TEST(GgufTokenizerSpm, MergesGoByScoreThenPositionAndMissingPiecesByBytes) {
    const Tokenizer& tok = tiny_spm();
    const auto id = [&](std::string_view piece) { return tok.token_id(piece).value(); };
    // "bc" (-2.5) outscores "ab" (-3): left to right would give ab, then abc. The space prefix
    // makes the first symbol "▁", which merges with "a" (-3.5) once "bc" has formed.
    EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{id(" a"), id("bc")}));
    // Equal scores: the leftmost "aa" merges first, which leaves no "▁a".
    EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{id(" "), id("aa"), id("a")}));
    // Ties between different pieces: he (-4) before ll (-4), then llo (-5) before hell (-6).
    EXPECT_EQ(tok.encode("hello", true), (std::vector<int32_t>{id(" hello")}));
    // No piece for 'é' or 'z': their UTF-8 bytes, as <0xXX> tokens (ids 3 + byte).
    EXPECT_EQ(tok.encode("z"), (std::vector<int32_t>{id(" "), 3 + 'z'}));
    EXPECT_EQ(tok.encode("é"), (std::vector<int32_t>{id(" "), 3 + 0xC3, 3 + 0xA9}));
}

TEST(GgufTokenizerSpm, DecodeGivesBackTheText) {
    const Tokenizer& tok = tiny_spm();
    for (const std::string text : {"hello world", "Hello world", "  hello", "hello\nworld", "héllo",
                                   " a b c d", "aa ab abc", "z"}) {
        EXPECT_EQ(tok.decode(tok.encode(text)), text) << text;
    }
    // Byte tokens of one character, streamed: held back until the character is complete.
    StreamDecoder stream(tok);
    EXPECT_EQ(stream.push(3 + 0xC3), "");
    EXPECT_EQ(stream.push(3 + 0xA9), "é");
}

TEST(GgufTokenizerSpm, BosEosAndSpecialTokensComeFromTheVocabulary) {
    const Tokenizer& tok = tiny_spm();
    EXPECT_EQ(tok.bos_token_id(), 1);
    EXPECT_EQ(tok.eos_token_id(), 2);
    EXPECT_TRUE(tok.add_bos_token());
    EXPECT_EQ(tok.end_of_generation_ids(), std::vector<int32_t>{2});
    EXPECT_TRUE(tok.is_special(0));  // <unk>
    EXPECT_FALSE(tok.is_special(tok.token_id("<tool>").value()));  // user-defined
}

// Tokens llama.cpp treats by their text rather than their stated type (hand-written in
// testdata/tokenizer/tiny_roles.gguf): end-of-generation and fill-in-the-middle texts become control tokens, gpt-oss's
// <|channel|> user-defined, <|end|> and </s> stop ending generation beside <|return|>/<|call|> and <|tool_response>;
// and text merges into a control token when special tokens are not parsed.
TEST(GgufTokenizerRoles, TokenTypesByTextAndEndOfGenerationMatchLlamaCpp) {
    const Tokenizer tok = Tokenizer::from_gguf(GgufFile(repo_path("testdata/tokenizer/tiny_roles.gguf")));
    expect_goldens(read_jsonl(repo_path("testdata/goldens/tiny_roles_tokenize.jsonl")),
                   [&](const json&) -> const Tokenizer& { return tok; });
    testing::expect_vocab_facts(tok, read_json(repo_path("testdata/goldens/tiny_roles_vocab.json")));
}

TEST(GgufTokenizerErrors, BadVocabulariesThrowNamingTheProblem) {
    const auto fails_with = [](const GgufVocab& v, const std::string& part) {
        try {
            Tokenizer::from_gguf_vocab(v);
        } catch (const std::runtime_error& e) {
            return std::string(e.what()).find(part) != std::string::npos
                       ? ::testing::AssertionSuccess()
                       : ::testing::AssertionFailure() << "message: " << e.what();
        }
        return ::testing::AssertionFailure() << "no exception";
    };
    GgufVocab v;
    v.model = "gpt2";
    v.tokens = {"a", "b", "ab"};
    v.merges = {"a b"};
    EXPECT_EQ(Tokenizer::from_gguf_vocab(v).encode("ab"), std::vector<int32_t>{2});

    GgufVocab bad = v;
    bad.model = "bert";
    EXPECT_TRUE(fails_with(bad, "tokenizer.ggml.model \"bert\" is not supported"));
    bad = v;
    bad.pre = "no-such-pre";
    EXPECT_TRUE(fails_with(bad, "\"no-such-pre\" is not a supported pre-tokenizer"));
    bad = v;
    bad.types = {GgufTokenType::Normal};
    EXPECT_TRUE(fails_with(bad, "tokenizer.ggml.token_type has 1 entries for 3 tokens"));
    bad = v;
    bad.merges = {"ab"};
    EXPECT_TRUE(fails_with(bad, "tokenizer.ggml.merges[0] \"ab\" is not two tokens"));
    bad = v;
    bad.merges = {"a c"};
    EXPECT_TRUE(fails_with(bad, "unknown token \"c\""));
    bad = v;
    bad.tokens.clear();
    EXPECT_TRUE(fails_with(bad, "tokenizer.ggml.tokens is empty"));
}

TEST(GgufTokenizerCli, TokenizeTakesAGgufFile) {
    const auto lines = read_jsonl(repo_path("testdata/goldens/tiny_spm_tokenize.jsonl"));
    const json& first = lines.at(0);
    ASSERT_FALSE(first.at("special").get<bool>());
    const auto r = testing::run_tracelm("tokenize --model '" + spm_path() + "' --text '" +
                                        first.at("text").get<std::string>() + "'");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out, first.at("ids").dump() + "\n");
}

}  // namespace
}  // namespace tracelm
