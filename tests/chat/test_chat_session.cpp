// The token ids `tracelm chat` keeps across turns (chat/chat_session.h).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "chat/chat_session.h"
#include "cli/model_loading.h"

namespace tracelm {
namespace {

using nlohmann::ordered_json;

const Tokenizer& qwen3_tokenizer() {
    static const Tokenizer tok = Tokenizer::from_file(testing::repo_path("models/qwen3-tokenizer/tokenizer.json"));
    return tok;
}

// A real template of testdata/chat_templates/ with the Qwen3 tokenizer's tokens.
ChatTemplate fixture_template(const std::string& name) {
    std::ifstream in(testing::repo_path("testdata/chat_templates/" + name + ".jinja"));
    const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return ChatTemplate::for_tokenizer(qwen3_tokenizer(), source);
}

ordered_json message(const std::string& role, const std::string& content) {
    return {{"role", role}, {"content", content}};
}

std::string text_of(const ChatTemplate& tmpl, const ordered_json& messages) {
    ChatInput input;
    input.messages = messages;
    return tmpl.apply(input);
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Each prompt is the previous prompt, the reply's ids as sampled (one with an end-of-turn token, one cut short
// without), then the encoding of the text after them; the ids decode to the template's text of the conversation.
TEST(ChatSession, KeepsEarlierTurnsIdsAndNamesRepliesAsDecodedSpans) {
    const Tokenizer& tok = qwen3_tokenizer();
    const ChatTemplate tmpl = fixture_template("qwen3");
    ChatSession s(tok, tmpl, "Be brief.");
    ordered_json conv = {message("system", "Be brief."), message("user", "Hello")};

    const auto p1 = s.user("Hello");
    EXPECT_EQ(p1.ids, encode_prompt(tok, text_of(tmpl, conv)));
    EXPECT_TRUE(p1.decoded.empty());
    EXPECT_FALSE(p1.reencoded);

    const int32_t im_end = *tok.token_id("<|im_end|>");
    const auto r1 = cat(tok.encode("Hi there!"), {im_end});
    s.assistant(r1, "Hi there!");
    conv.push_back(message("assistant", "Hi there!"));
    conv.push_back(message("user", "And then?"));
    const auto p2 = s.user("And then?");
    const auto n1 = static_cast<int64_t>(p1.ids.size());
    ASSERT_GT(p2.ids.size(), p1.ids.size() + r1.size());
    EXPECT_EQ(std::vector<int32_t>(p2.ids.begin(), p2.ids.begin() + n1 + static_cast<int64_t>(r1.size())),
              cat(p1.ids, r1));
    ASSERT_EQ(p2.decoded.size(), 1u);
    EXPECT_EQ(p2.decoded[0].begin, n1);
    EXPECT_EQ(p2.decoded[0].end, n1 + static_cast<int64_t>(r1.size()));
    EXPECT_EQ(tok.decode(p2.ids), text_of(tmpl, conv));
    EXPECT_FALSE(p2.reencoded);

    const auto r2 = tok.encode("Then it");  // cut short by --max-tokens: no end-of-turn token
    s.assistant(r2, "Then it");
    conv.push_back(message("assistant", "Then it"));
    conv.push_back(message("user", "Go on"));
    const auto p3 = s.user("Go on");
    const auto n2 = static_cast<int64_t>(p2.ids.size());
    EXPECT_EQ(std::vector<int32_t>(p3.ids.begin(), p3.ids.begin() + n2 + static_cast<int64_t>(r2.size())),
              cat(p2.ids, r2));
    ASSERT_EQ(p3.decoded.size(), 2u);
    EXPECT_EQ(p3.decoded[1].begin, n2);
    EXPECT_EQ(p3.decoded[1].end, n2 + static_cast<int64_t>(r2.size()));
    EXPECT_EQ(tok.decode(p3.ids), text_of(tmpl, conv));
}

// Llama 3.1's template trims each message, so a reply that ends with a newline is not what the next prompt's text
// holds: the conversation is encoded afresh, with no decoded spans (it is then computed as a plain prompt).
TEST(ChatSession, ATemplateThatRewritesEarlierTurnsIsEncodedAfresh) {
    const Tokenizer& tok = qwen3_tokenizer();
    const ChatTemplate tmpl = fixture_template("llama-3.1-8b-instruct");
    ChatSession s(tok, tmpl, "");
    ordered_json conv = {message("user", "Hello")};
    s.user("Hello");
    s.assistant(tok.encode("Hi\n"), "Hi\n");
    conv.push_back(message("assistant", "Hi\n"));
    conv.push_back(message("user", "More"));
    const auto p = s.user("More");
    EXPECT_TRUE(p.reencoded);
    EXPECT_TRUE(p.decoded.empty());
    EXPECT_EQ(p.ids, encode_prompt(tok, text_of(tmpl, conv)));
    // The next turn continues from the fresh encoding.
    s.assistant(tok.encode("Yes"), "Yes");
    const auto q = s.user("Ok");
    EXPECT_FALSE(q.reencoded);
    EXPECT_EQ(std::vector<int32_t>(q.ids.begin(), q.ids.begin() + static_cast<int64_t>(p.ids.size())), p.ids);
}

// A message the template refuses (Gemma 3's roles must alternate) leaves the conversation as it was.
TEST(ChatSession, AMessageTheTemplateRefusesLeavesTheConversationAsItWas) {
    const Tokenizer& tok = qwen3_tokenizer();
    ChatSession s(tok, fixture_template("gemma-3-it"), "");
    s.user("Hello");
    EXPECT_THROW(s.user("Hello again"), ChatTemplateError);  // two user turns in a row
    s.assistant(tok.encode("Hi"), "Hi");
    const auto p2 = s.user("Bye");
    EXPECT_FALSE(p2.reencoded);
    EXPECT_EQ(tok.decode(p2.ids), "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi<end_of_turn>\n"
                                  "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

}  // namespace
}  // namespace tracelm
