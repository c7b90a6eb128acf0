// The token ids `tracelm chat` keeps across turns (chat/chat_session.h).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "chat/chat_session.h"
#include "cli/model_loading.h"

namespace tracelm {
namespace {

ChatTemplate golden_template(const std::string& name) {
    std::ifstream in(testing::repo_path("testdata/goldens/chat_templates.json"));
    return ChatTemplate::detect(nlohmann::json::parse(in)["templates"][name].get<std::string>());
}

const Tokenizer& qwen3_tokenizer() {
    static const Tokenizer tok = Tokenizer::from_file(testing::repo_path("models/qwen3-tokenizer/tokenizer.json"));
    return tok;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Each prompt is the previous prompt, the reply's ids as sampled (one with an end-of-turn token, one cut short
// without), then the encoding of the text after them; the ids decode to the template's text of the conversation.
TEST(ChatSession, KeepsEarlierTurnsIdsAndNamesRepliesAsDecodedSpans) {
    const Tokenizer& tok = qwen3_tokenizer();
    const ChatTemplate tmpl = golden_template("qwen3");
    ChatSession s(tok, tmpl, "Be brief.");
    std::vector<ChatMessage> conv = {{"system", "Be brief."}, {"user", "Hello"}};

    const auto p1 = s.user("Hello");
    EXPECT_EQ(p1.ids, encode_prompt(tok, tmpl.apply(conv)));
    EXPECT_TRUE(p1.decoded.empty());
    EXPECT_FALSE(p1.reencoded);

    const int32_t im_end = *tok.token_id("<|im_end|>");
    const auto r1 = cat(tok.encode("Hi there!"), {im_end});
    s.assistant(r1, "Hi there!");
    conv.push_back({"assistant", "Hi there!"});
    conv.push_back({"user", "And then?"});
    const auto p2 = s.user("And then?");
    const auto n1 = static_cast<int64_t>(p1.ids.size());
    ASSERT_GT(p2.ids.size(), p1.ids.size() + r1.size());
    EXPECT_EQ(std::vector<int32_t>(p2.ids.begin(), p2.ids.begin() + n1 + static_cast<int64_t>(r1.size())),
              cat(p1.ids, r1));
    ASSERT_EQ(p2.decoded.size(), 1u);
    EXPECT_EQ(p2.decoded[0].begin, n1);
    EXPECT_EQ(p2.decoded[0].end, n1 + static_cast<int64_t>(r1.size()));
    EXPECT_EQ(tok.decode(p2.ids), tmpl.apply(conv));
    EXPECT_FALSE(p2.reencoded);

    const auto r2 = tok.encode("Then it");  // cut short by --max-tokens: no end-of-turn token
    s.assistant(r2, "Then it");
    conv.push_back({"assistant", "Then it"});
    conv.push_back({"user", "Go on"});
    const auto p3 = s.user("Go on");
    const auto n2 = static_cast<int64_t>(p2.ids.size());
    EXPECT_EQ(std::vector<int32_t>(p3.ids.begin(), p3.ids.begin() + n2 + static_cast<int64_t>(r2.size())),
              cat(p2.ids, r2));
    ASSERT_EQ(p3.decoded.size(), 2u);
    EXPECT_EQ(p3.decoded[1].begin, n2);
    EXPECT_EQ(p3.decoded[1].end, n2 + static_cast<int64_t>(r2.size()));
    EXPECT_EQ(tok.decode(p3.ids), tmpl.apply(conv));
}

// Llama 3's template trims each message, so a reply that ends with a newline is not what the next prompt's text
// holds: the conversation is encoded afresh, with no decoded spans (it is then computed as a plain prompt).
TEST(ChatSession, ATemplateThatRewritesEarlierTurnsIsEncodedAfresh) {
    const Tokenizer& tok = qwen3_tokenizer();
    const ChatTemplate tmpl = golden_template("llama3");
    ChatSession s(tok, tmpl, "");
    std::vector<ChatMessage> conv = {{"user", "Hello"}};
    s.user("Hello");
    s.assistant(tok.encode("Hi\n"), "Hi\n");
    conv.push_back({"assistant", "Hi\n"});
    conv.push_back({"user", "More"});
    const auto p = s.user("More");
    EXPECT_TRUE(p.reencoded);
    EXPECT_TRUE(p.decoded.empty());
    EXPECT_EQ(p.ids, encode_prompt(tok, tmpl.apply(conv)));
    // The next turn continues from the fresh encoding.
    s.assistant(tok.encode("Yes"), "Yes");
    const auto q = s.user("Ok");
    EXPECT_FALSE(q.reencoded);
    EXPECT_EQ(std::vector<int32_t>(q.ids.begin(), q.ids.begin() + static_cast<int64_t>(p.ids.size())), p.ids);
}

}  // namespace
}  // namespace tracelm
