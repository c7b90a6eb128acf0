// Chat prompts against the models' real Jinja templates rendered by jinja2
// (testdata/goldens/chat_templates.json, from scripts/make_chat_goldens.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

nlohmann::json goldens() {
    std::ifstream in(testing::repo_path("testdata/goldens/chat_templates.json"));
    return nlohmann::json::parse(in);
}

TEST(ChatTemplate, MatchesJinjaRenderingOfRealTemplates) {
    const nlohmann::json g = goldens();
    ASSERT_GE(g["cases"].size(), 12u);
    for (const auto& c : g["cases"]) {
        const std::string name = c["template"];
        const ChatTemplate t = ChatTemplate::detect(g["templates"][name].get<std::string>());
        std::vector<ChatMessage> msgs;
        for (const auto& m : c["messages"]) msgs.push_back({m["role"], m["content"]});
        EXPECT_EQ(t.apply(msgs, c["add_generation_prompt"].get<bool>()), c["text"].get<std::string>())
            << name << " " << c["messages"].dump();
    }
}

TEST(ChatTemplate, DefaultSystemPromptOnlyWhenTheTemplateHasOne) {
    const nlohmann::json g = goldens();
    EXPECT_EQ(ChatTemplate::detect(g["templates"]["smollm2"]).default_system(),
              "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    EXPECT_EQ(ChatTemplate::detect(g["templates"]["qwen3"]).default_system(), "");
    EXPECT_EQ(ChatTemplate::detect(g["templates"]["llama3"]).style(), ChatTemplate::Style::Llama3);
}

TEST(ChatTemplate, UnknownOrMissingTemplateIsAClearError) {
    try {
        ChatTemplate::detect("{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}");
        FAIL() << "accepted a Mistral-style template";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown chat template"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ChatTemplate::detect(""), std::runtime_error);
}

}  // namespace
}  // namespace tracelm
