// The chat template object (chat/chat_template.h): the variables it gives a model's Jinja template (messages as
// given, tools, documents, add_generation_prompt, the tokenizer's BOS and EOS strings, extra keyword arguments), the
// one BOS a prompt starts with, content parts, and its errors. Expected texts are Python jinja2's.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "engine/prompt.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using nlohmann::ordered_json;

using testing::read_text;

const Tokenizer& qwen3() {
    static const Tokenizer tok = Tokenizer::from_file(testing::repo_path("models/qwen3-tokenizer/tokenizer.json"));
    return tok;
}

// The Qwen3 vocabulary with a tokenizer_config.json that names `<|endoftext|>` as BOS and says whether to add it.
Tokenizer qwen3_with_bos(bool add_bos) {
    ordered_json config = ordered_json::parse(read_text("models/qwen3-tokenizer/tokenizer_config.json"));
    config["bos_token"] = "<|endoftext|>";
    config["add_bos_token"] = add_bos;
    return Tokenizer::from_json_text(read_text("models/qwen3-tokenizer/tokenizer.json"), config.dump());
}

ChatInput user_says(const std::string& text) {
    ChatInput in;
    in.messages.push_back({{"role", "user"}, {"content", text}});
    return in;
}

TEST(ChatTemplate, RendersTheModelsOwnTemplateWithItsTokens) {
    const ChatTemplate t = ChatTemplate::for_tokenizer(qwen3());
    EXPECT_EQ(t.apply(user_says("What is the capital of France?")),
              "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
    ChatInput no_prompt = user_says("Hi");
    no_prompt.add_generation_prompt = false;
    EXPECT_EQ(t.apply(no_prompt), "<|im_start|>user\nHi<|im_end|>\n");
    // Qwen3's tokenizer has no BOS: like transformers, the template does not see bos_token at all.
    const ChatTemplate probe = ChatTemplate::for_tokenizer(qwen3(), "{{ bos_token is defined }} {{ eos_token }}");
    EXPECT_EQ(probe.apply(user_says("x")), "False <|im_end|>");
}

TEST(ChatTemplate, ToolsDocumentsKwargsAndMessageFieldsReachTheTemplate) {
    const ChatTemplate t = ChatTemplate::for_tokenizer(
        qwen3(),
        "{{ tools | tojson }}|{{ documents[0].title }}|{{ enable_thinking }}|{{ add_generation_prompt }}|"
        "{% for m in messages %}{{ m.role }}:{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}"
        "{% endif %}:{{ m.tool_call_id }};{% endfor %}");
    ChatInput in;
    in.messages = ordered_json::parse(R"([
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
            "function": {"name": "f", "arguments": {"z": 1, "a": "é"}}}]},
        {"role": "tool", "tool_call_id": "abc", "content": "ok"}])");
    in.tools =
        ordered_json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}])");
    in.documents = ordered_json::parse(R"([{"title": "Doc"}])");
    in.kwargs = {{"enable_thinking", false}};
    in.add_generation_prompt = false;
    EXPECT_EQ(t.apply(in), R"([{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}])"
                           R"(|Doc|False|False|assistant:{"z": 1, "a": "é"}:;tool::abc;)");
    // Without them, tools and documents are None (defined), as transformers passes them.
    const ChatTemplate probe = ChatTemplate::for_tokenizer(qwen3(), "{{ tools }} {{ documents is none }}");
    EXPECT_EQ(probe.apply(user_says("x")), "None True");
    // Keyword arguments win over the standard variables, as in apply_chat_template.
    ChatInput over = user_says("x");
    over.kwargs = {{"eos_token", "</s>"}};
    EXPECT_EQ(ChatTemplate::for_tokenizer(qwen3(), "{{ eos_token }}").apply(over), "</s>");
}

// When the tokenizer adds BOS itself, a BOS the template writes first is dropped from the text, so the prompt starts
// with exactly one BOS whether or not the template writes one; when it does not, the template's BOS is the one.
TEST(ChatTemplate, ThePromptStartsWithExactlyOneBos) {
    for (const bool add_bos : {true, false}) {
        const Tokenizer tok = qwen3_with_bos(add_bos);
        const int32_t bos = *tok.bos_token_id();
        ASSERT_EQ(tok.token_text(bos), "<|endoftext|>");
        for (const std::string source : {"{{ bos_token }}{{ messages[0].content }}", "{{ messages[0].content }}"}) {
            const std::string text = ChatTemplate::for_tokenizer(tok, source).apply(user_says("Hello"));
            const std::vector<int32_t> ids = encode_prompt(tok, text);
            const bool template_writes_bos = source.rfind("{{ bos_token }}", 0) == 0;
            if (!add_bos && !template_writes_bos) {
                EXPECT_EQ(std::count(ids.begin(), ids.end(), bos), 0) << source;
                continue;
            }
            ASSERT_FALSE(ids.empty());
            EXPECT_EQ(ids[0], bos) << source << " add_bos=" << add_bos;
            EXPECT_EQ(std::count(ids.begin(), ids.end(), bos), 1) << source << " add_bos=" << add_bos;
            EXPECT_EQ(tok.decode(ids), "<|endoftext|>Hello");
        }
    }
}

// vLLM's rule: a template that loops over a message's content (Gemma 3's) gets the list of parts; one that reads it
// as a string (Qwen3's) gets the text parts joined by newlines.
TEST(ChatTemplate, ContentPartsAreJoinedUnlessTheTemplateLoopsOverThem) {
    ChatInput in;
    in.messages = ordered_json::parse(
        R"([{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": " two"}]}])");
    const ChatTemplate qwen = ChatTemplate::for_tokenizer(qwen3());
    EXPECT_FALSE(qwen.takes_content_parts());
    EXPECT_EQ(qwen.apply(in), "<|im_start|>user\none\n two<|im_end|>\n<|im_start|>assistant\n");
    const ChatTemplate gemma =
        ChatTemplate::for_tokenizer(qwen3(), read_text("testdata/chat_templates/gemma-3-it.jinja"));
    EXPECT_TRUE(gemma.takes_content_parts());
    EXPECT_EQ(gemma.apply(in), "<start_of_turn>user\nonetwo<end_of_turn>\n<start_of_turn>model\n");
    // A loop over a variable set from the content counts too.
    const ChatTemplate via_set = ChatTemplate::for_tokenizer(
        qwen3(), "{% for m in messages %}{% set c = m['content'] %}{% for p in c %}[{{ p.text }}]{% endfor %}"
                 "{% endfor %}");
    EXPECT_TRUE(via_set.takes_content_parts());
    EXPECT_EQ(via_set.apply(in), "[one][ two]");
}

// transformers' continue_final_message: the text ends right after the last occurrence of the final message's
// content: after the content as written where the template kept it, after its stripped text where the template
// stripped it; a list content continues its last text part; content the template changed is an error.
TEST(ChatTemplate, ContinuingTheFinalMessageCutsTheTextAfterItsContent) {
    const auto continuing = [](const std::string& user, const ordered_json& assistant) {
        ChatInput in = user_says(user);
        in.messages.push_back({{"role", "assistant"}, {"content", assistant}});
        in.add_generation_prompt = false;
        in.continue_final_message = true;
        return in;
    };
    const std::string turns = "{% for m in messages %}<{{ m.role }}>{{ m.content%s }}</{{ m.role }}>{% endfor %}";
    const auto tmpl = [&](const std::string& filter) {
        std::string t = turns;
        t.replace(t.find("%s"), 2, filter);
        return ChatTemplate::for_tokenizer(qwen3(), t);
    };
    EXPECT_EQ(tmpl("").apply(continuing("hi", "Once upon ")), "<user>hi</user><assistant>Once upon ");
    EXPECT_EQ(tmpl(" | trim").apply(continuing("hi", " Once upon ")), "<user>hi</user><assistant>Once upon");
    EXPECT_EQ(tmpl("").apply(continuing("Hello", "Hello")), "<user>Hello</user><assistant>Hello");
    const ordered_json parts = ordered_json::parse(R"([{"type": "text", "text": "A"}, {"type": "text", "text": "B"}])");
    EXPECT_EQ(tmpl("").apply(continuing("hi", parts)), "<user>hi</user><assistant>A\nB");
    ChatInput closed = continuing("hi", "Once upon");
    closed.continue_final_message = false;
    EXPECT_EQ(tmpl("").apply(closed), "<user>hi</user><assistant>Once upon</assistant>");
    try {
        tmpl(" | upper").apply(continuing("hi", "once"));
        FAIL() << "a final message the template changed was continued";
    } catch (const ChatTemplateError& e) {
        EXPECT_NE(std::string(e.what()).find("does not appear"), std::string::npos) << e.what();
    }
}

TEST(ChatTemplate, StrftimeNowReadsTheGivenTime) {
    ChatInput in = user_says("x");
    in.now = 1736944496;  // 2025-01-15 12:34:56 UTC
    EXPECT_EQ(ChatTemplate::for_tokenizer(qwen3(), "{{ strftime_now('%d %b %Y %H:%M') }}").apply(in),
              "15 Jan 2025 12:34");
}

TEST(ChatTemplate, AMissingOrBrokenTemplateIsAClearError) {
    const Tokenizer no_template = Tokenizer::from_json_text(read_text("models/qwen3-tokenizer/tokenizer.json"));
    try {
        ChatTemplate::for_tokenizer(no_template);
        FAIL() << "no error without a template";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
    }
    try {
        ChatTemplate::for_tokenizer(qwen3(), "line one\n{% for m in messages %}\n{{ m.content ");
        FAIL() << "no error for a broken template";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("does not parse"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
    }
}

TEST(ChatTemplate, ATemplatesOwnErrorIsAChatTemplateErrorWithItsMessage) {
    const ChatTemplate gemma =
        ChatTemplate::for_tokenizer(qwen3(), read_text("testdata/chat_templates/gemma-3-it.jinja"));
    ChatInput in = user_says("a");
    in.messages.push_back({{"role", "user"}, {"content", "b"}});
    try {
        gemma.apply(in);
        FAIL() << "Gemma 3 accepted two user turns in a row";
    } catch (const ChatTemplateError& e) {
        EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate user/assistant/user/assistant/..."),
                  std::string::npos)
            << e.what();
    }
    const ChatTemplate bad = ChatTemplate::for_tokenizer(qwen3(), "{{ messages[0].content + 1 }}");
    EXPECT_THROW(bad.apply(user_says("x")), ChatTemplateError);
}

}  // namespace
}  // namespace tracelm
