// A tool-calling conversation as an OpenAI client sends it (tools, an assistant call with its arguments as JSON text,
// the tool's result) through the request parser and the model's own chat template gives the prompt transformers'
// renderer gives the same conversation (testdata/goldens/tool_conversations.json, scripts/make_tool_goldens.py), for
// the real templates of Qwen3, Qwen2.5, Llama 3.1/3.2, Hermes 3, Mistral and DeepSeek-R1.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "serve/openai_request.h"
#include "support/test_support.h"

namespace tracelm::serve {
namespace {

using nlohmann::ordered_json;

using testing::read_text;

std::optional<std::string> token(const ordered_json& v) {
    if (v.is_null()) return std::nullopt;
    return v.get<std::string>();
}

TEST(ToolRendering, OpenAIRequestsRenderAsTransformersRendersThem) {
    const ordered_json doc = ordered_json::parse(read_text("testdata/goldens/tool_conversations.json"));
    ASSERT_GE(doc["cases"].size(), 10u);
    for (const ordered_json& c : doc["cases"]) {
        const std::string name = c["template"];
        SCOPED_TRACE(name);
        const OpenAIRequest r = parse_request(Endpoint::ChatCompletions, c["request"].dump());
        const ChatTemplate tmpl(read_text("testdata/chat_templates/" + name + ".jinja"), token(c["bos_token"]),
                                token(c["eos_token"]), /*strip_bos=*/false);
        EXPECT_TRUE(tmpl.takes_object_arguments());
        ChatInput in;
        in.messages = r.messages;
        in.tools = r.tools;
        in.kwargs = r.chat_template_kwargs;
        in.arguments_as_json_text = true;
        EXPECT_EQ(tmpl.apply(in), c["text"].get<std::string>());
    }
}

TEST(ToolRendering, ATemplateThatConcatenatesArgumentsGetsTheText) {
    // String + dict is a TypeError in jinja2, so such a template only renders the text OpenAI sent.
    const ChatTemplate tmpl(
        "{% for m in messages %}{% for c in m.tool_calls or [] %}[{{ c.function.name + ' ' + c.function.arguments }}]"
        "{% endfor %}{% endfor %}",
        std::nullopt, std::nullopt, false);
    EXPECT_FALSE(tmpl.takes_object_arguments());
    ChatInput in;
    in.messages = ordered_json::parse(R"([{"role": "assistant", "content": null, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}])");
    in.arguments_as_json_text = true;
    EXPECT_EQ(tmpl.apply(in), "[f {\"a\": 1}]");
    const ChatTemplate tojson("{% for m in messages %}{% for c in m.tool_calls or [] %}"
                              "{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}",
                              std::nullopt, std::nullopt, false);
    EXPECT_TRUE(tojson.takes_object_arguments());
    EXPECT_EQ(tojson.apply(in), "{\"a\": 1}");
}

TEST(ToolRendering, ToolsChangeThePrompt) {
    // The SmolLM2 server test renders with Qwen3's template: offering tools must reach the prompt.
    const ChatTemplate tmpl(read_text("testdata/chat_templates/qwen3.jinja"), std::nullopt, "<|im_end|>", false);
    ChatInput in;
    in.messages = ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
    const std::string plain = tmpl.apply(in);
    in.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "ping"}}])");
    const std::string with_tools = tmpl.apply(in);
    EXPECT_NE(with_tools, plain);
    EXPECT_NE(with_tools.find("\"name\": \"ping\""), std::string::npos);
}

}  // namespace
}  // namespace tracelm::serve
