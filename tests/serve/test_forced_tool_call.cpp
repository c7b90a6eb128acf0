// Forced tool calls as constraints (serve/forced_tool_call.h) on Qwen3's real vocabulary: the Hermes format's text of
// a call, tokenized as the model would write it, walks through the matcher with every token allowed by the mask
// before it; prose, another function, arguments the schema refuses and (without parallel calls) a second call are
// refused. The same with <tool_call> held as a special token, which grammar text never matches.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "ops/sampling/sampling.h"
#include "serve/forced_tool_call.h"
#include "support/qwen3_tokenizer.h"

namespace tracelm::serve {
namespace {

using nlohmann::ordered_json;
using tools::ToolCallFormat;

const ordered_json& tools_json() {
    static const ordered_json t = ordered_json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
         "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
         "required": ["city"]}}},
        {"type": "function", "function": {"name": "ping"}}])");
    return t;
}

// Qwen3's tokenizer with <tool_call> and </tool_call> marked special, as some tokenizers ship such markers.
const Tokenizer& qwen3_special_markers() {
    static const Tokenizer tok = [] {
        std::ifstream f(TRACELM_SOURCE_DIR "/models/qwen3-tokenizer/tokenizer.json");
        std::stringstream ss;
        ss << f.rdbuf();
        // nlohmann::json, not ordered_json: the vocabulary object's 151k keys make ordered_json's linear-lookup map
        // take seconds, and no key order matters to the tokenizer.
        nlohmann::json j = nlohmann::json::parse(ss.str());
        for (nlohmann::json& t : j["added_tokens"])
            if (t["content"] == "<tool_call>" || t["content"] == "</tool_call>") t["special"] = true;
        return Tokenizer::from_json_text(j.dump());
    }();
    return tok;
}

// How far `text` gets through the matcher of the forced constraint: the number of its tokens taken (each allowed by
// the mask first), and whether the whole text was then a complete answer that may end.
struct Walk {
    size_t taken = 0, tokens = 0;
    bool complete = false;
};
Walk walk(const Tokenizer& tok, const std::string& name, bool parallel, const std::string& text) {
    static std::map<const Tokenizer*, std::unique_ptr<grammar::Compiler>> compilers;  // one per vocabulary
    auto& compiler = compilers[&tok];
    if (!compiler) compiler = std::make_unique<grammar::Compiler>(tok, tok.vocab_size());
    grammar::Matcher m(compiler->compile(forced_call_constraint(tok, ToolCallFormat::Hermes, tools_json(), name,
                                                               parallel)));
    std::vector<uint32_t> mask(static_cast<size_t>(sampling::mask_words(tok.vocab_size())));
    const int32_t eos = tok.end_of_generation_ids().front();
    Walk w;
    const std::vector<int32_t> ids = tok.encode(text);  // a marker held as a special token is that token
    w.tokens = ids.size();
    for (const int32_t id : ids) {
        m.fill_mask(mask.data());
        if (!sampling::mask_allows(mask.data(), id) || !m.accept(id)) return w;
        EXPECT_FALSE(sampling::mask_allows(mask.data(), eos) && w.taken == 0) << "an empty answer may end";
        ++w.taken;
    }
    m.fill_mask(mask.data());
    w.complete = m.complete() && sampling::mask_allows(mask.data(), eos);
    return w;
}

const std::string kWeather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                             "\"days\": 3}}\n</tool_call>";
const std::string kPing = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>";

void expect_forced_calls(const Tokenizer& tok) {
    const auto whole = [&](const std::string& name, bool parallel, const std::string& text) {
        const Walk w = walk(tok, name, parallel, text);
        return w.taken == w.tokens && w.complete;
    };
    EXPECT_TRUE(whole("", true, kWeather));
    EXPECT_TRUE(whole("", true, kPing));
    EXPECT_TRUE(whole("get_weather", true, kWeather));
    EXPECT_TRUE(whole("", true, kWeather + "\n" + kPing));
    EXPECT_FALSE(whole("ping", true, kWeather)) << "a function other than the named one";
    EXPECT_FALSE(whole("", false, kWeather + "\n" + kPing)) << "a second call without parallel_tool_calls";
    EXPECT_EQ(walk(tok, "", true, "Sure, let me check.").taken, 0u) << "prose instead of a call";
    EXPECT_FALSE(whole("", true, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n"
                                 "</tool_call>"))
        << "the required city missing";
    EXPECT_FALSE(whole("", true, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                                 "\"days\": 9}}\n</tool_call>"))
        << "days beyond its maximum";
    const Walk half = walk(tok, "", true, kWeather.substr(0, kWeather.find("3}}")));
    EXPECT_EQ(half.taken, half.tokens);
    EXPECT_FALSE(half.complete) << "an unfinished call may not end";
}

TEST(ForcedToolCall, HermesCallsWalkAndEverythingElseIsRefused) { expect_forced_calls(testing::qwen3_tokenizer()); }

TEST(ForcedToolCall, MarkersHeldAsSpecialTokensAreMatchedAsThoseTokens) {
    const Tokenizer& tok = qwen3_special_markers();
    const auto open = tok.token_id("<tool_call>");
    ASSERT_TRUE(open && tok.is_special(*open));
    ASSERT_EQ(tok.encode(kWeather).front(), *open);
    expect_forced_calls(tok);
}

TEST(ForcedToolCall, UnsupportedParametersAreRefusedNamingTheFunction) {
    const ordered_json bad = ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"x": {"not": {"type": "string"}}}}}}])");
    try {
        forced_call_constraint(testing::qwen3_tokenizer(), ToolCallFormat::Hermes, bad, "", true);
        FAIL() << "accepted 'not'";
    } catch (const grammar::GrammarError& e) {
        EXPECT_NE(std::string(e.what()).find("'f'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("'not'"), std::string::npos) << e.what();
    }
    EXPECT_THROW(forced_call_constraint(testing::qwen3_tokenizer(), ToolCallFormat::None, tools_json(), "", true),
                 grammar::GrammarError);
}

}  // namespace
}  // namespace tracelm::serve
