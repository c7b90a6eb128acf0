// Constrained decoding's constraints (grammar/grammar.h) on Qwen3's vocabulary: the JSON schema subset and its
// limits refused by name, and matchers that walk real tokenizations of valid answers (every token allowed by the
// mask before it is taken, the end-of-generation token allowed only once the answer is complete) and refuse invalid
// ones.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "ops/sampling/sampling.h"
#include "support/qwen3_tokenizer.h"

namespace tracelm {
namespace {

using grammar::GrammarError;
using grammar::Kind;

const grammar::Compiler& compiler() {
    static const grammar::Compiler c(testing::qwen3_tokenizer(), testing::qwen3_tokenizer().vocab_size());
    return c;
}

std::string refusal(const std::string& schema) {
    try {
        grammar::check_json_schema(schema);
    } catch (const GrammarError& e) {
        return e.what();
    }
    return "";
}

TEST(JsonSchemaCheck, RefusesUnsupportedKeywordsTypesAndRefsByName) {
    EXPECT_NE(refusal(R"({"type": "object", "not": {"type": "null"}})").find("'not'"), std::string::npos);
    EXPECT_NE(refusal(R"({"type": "array", "uniqueItems": true})").find("'uniqueItems'"), std::string::npos);
    EXPECT_NE(refusal(R"({"type": "bogus"})").find("\"bogus\""), std::string::npos);
    EXPECT_NE(refusal(R"({"properties": {"a": {"type": ["string", 3]}}})").find("#/properties/a/type"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"$ref": "http://example.com/s.json"})").find("$ref"), std::string::npos);
    EXPECT_NE(refusal(R"({"type": "array", "maxItems": 1000000})").find("maxItems"), std::string::npos);
    EXPECT_NE(refusal("[1, 2]").find("must be an object"), std::string::npos);
    EXPECT_NE(refusal("{").find("not valid JSON"), std::string::npos);
    EXPECT_EQ(refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"],
                         "$defs": {"A": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}},
                         "additionalProperties": false, "title": "t"})"),
              "");
}

TEST(JsonSchemaCheck, HostileSchemasAreRefusedQuickly) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string deep;
    for (int i = 0; i < 5000; ++i) deep += R"({"type": "array", "items": )";
    deep += "{}";
    for (int i = 0; i < 5000; ++i) deep += "}";
    EXPECT_NE(refusal(deep), "");  // also longer than the limit
    std::string nested;
    for (int i = 0; i < 40; ++i) nested += R"({"type": "array", "items": )";
    nested += "{}";
    nested.append(40, '}');
    EXPECT_NE(refusal(nested).find("deeper"), std::string::npos);
    std::string wide = R"({"type": "object", "properties": {)";
    for (int i = 0; i < 5000; ++i) {
        wide += i ? ",\"p" : "\"p";
        wide += std::to_string(i);
        wide += "\": {}";
    }
    wide += "}}";
    EXPECT_NE(refusal(wide), "");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

// Walks `text`'s tokens through a matcher of `spec`: each must be allowed by the mask before it and accepted.
void expect_walks(const grammar::Spec& spec, const std::string& text) {
    const Tokenizer& tok = testing::qwen3_tokenizer();
    grammar::Matcher m(compiler().compile(spec));
    std::vector<uint32_t> mask(static_cast<size_t>(sampling::mask_words(compiler().vocab_size())));
    const int32_t eos = tok.end_of_generation_ids().front();
    for (const int32_t id : tok.encode(text, false)) {
        m.fill_mask(mask.data());
        ASSERT_TRUE(sampling::mask_allows(mask.data(), id)) << "token " << id << " '" << tok.token_text(id) << "'";
        ASSERT_FALSE(sampling::mask_allows(mask.data(), eos)) << "end of generation before the answer is complete";
        ASSERT_TRUE(m.accept(id));
    }
    EXPECT_TRUE(m.complete());
    m.fill_mask(mask.data());
    EXPECT_TRUE(sampling::mask_allows(mask.data(), eos));
    EXPECT_TRUE(m.accept(eos));
    EXPECT_TRUE(m.terminated());
}

TEST(Matcher, WalksValidAnswersOfEachKind) {
    const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}}, "required": ["name", "age"]})";
    expect_walks({Kind::JsonSchema, schema}, R"({"name": "Ada", "age": 36, "tags": ["a", "b"]})");
    expect_walks({Kind::JsonObject, ""}, R"({"x": [1, 2.5, null, true, {"y": "z"}]})");
    expect_walks({Kind::Regex, "[0-9]{3}-[a-z]+"}, "123-abc");
    expect_walks({Kind::Ebnf, R"(root ::= "yes" | "no")"}, "no");
}

TEST(Matcher, RefusesWhatTheConstraintForbids) {
    grammar::Matcher m(compiler().compile({Kind::JsonSchema, R"({"type": "object", "properties": {"n": {"type":
        "integer"}}, "required": ["n"]})"}));
    const Tokenizer& tok = testing::qwen3_tokenizer();
    std::vector<uint32_t> mask(static_cast<size_t>(sampling::mask_words(compiler().vocab_size())));
    m.fill_mask(mask.data());
    const int32_t hello = tok.encode("hello", false).front();
    EXPECT_FALSE(sampling::mask_allows(mask.data(), hello));
    EXPECT_FALSE(m.accept(hello));
    for (const int32_t id : tok.encode(R"({"n": )", false)) ASSERT_TRUE(m.accept(id));
    m.fill_mask(mask.data());
    const int32_t quote = tok.encode("\"", false).front();
    EXPECT_FALSE(sampling::mask_allows(mask.data(), quote)) << "a string where n is an integer";
    EXPECT_FALSE(m.complete());
}

TEST(Compiler, InvalidConstraintsAreGrammarErrors) {
    EXPECT_THROW(compiler().compile({Kind::Regex, "(unclosed"}), GrammarError);
    EXPECT_THROW(compiler().compile({Kind::Ebnf, "root ::= undefined_rule"}), GrammarError);
    EXPECT_THROW(compiler().compile({Kind::JsonSchema, R"({"type": "object", "if": {}})"}), GrammarError);
    EXPECT_THROW(compiler().compile({Kind::JsonSchema, R"({"$ref": "#/$defs/missing"})"}), GrammarError);
    EXPECT_THROW(compiler().compile({Kind::Regex, std::string(grammar::kMaxGrammarBytes + 1, 'a')}), GrammarError);
}

TEST(Compiler, RecursiveRefsCompile) {
    const std::string tree = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v", "kids"]}},
        "$ref": "#/$defs/node"})";
    expect_walks({Kind::JsonSchema, tree}, R"({"v": 1, "kids": [{"v": 2, "kids": []}]})");
}

}  // namespace
}  // namespace tracelm
