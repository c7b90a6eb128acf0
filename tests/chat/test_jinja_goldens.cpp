// tracelm's Jinja engine (src/chat/jinja) against Python jinja2 byte for byte, as Hugging Face's
// apply_chat_template configures it: every real chat template of testdata/chat_templates/ over every conversation
// of scripts/make_chat_goldens.py (testdata/goldens/chat_templates.json), and small templates that exercise one
// statement, filter, test, operator or method each (testdata/goldens/jinja_snippets.json). Where jinja2 raised,
// tracelm must raise too, with the template's own message when it came from raise_exception.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "chat/jinja/error.h"
#include "chat/jinja/json.h"
#include "chat/jinja/template.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using nlohmann::ordered_json;
using Variables = std::vector<std::pair<std::string, jinja::Value>>;

ordered_json read_ordered_json(const std::string& rel) {
    std::ifstream in(testing::repo_path(rel));
    return ordered_json::parse(in);
}

using testing::read_text;

// The outcome of one render: the text, or the error (parse or render).
struct TemplateOutcome {
    std::string text;
    std::optional<jinja::Error> error;
};

TemplateOutcome render(const std::string& source, const Variables& vars, std::time_t now) {
    try {
        return {jinja::Template(source).render(vars, now), std::nullopt};
    } catch (const jinja::Error& e) {
        return {"", e};
    }
}

void expect_like_jinja2(const ordered_json& golden, const TemplateOutcome& got, const std::string& what) {
    if (golden.contains("text")) {
        ASSERT_FALSE(got.error) << what << ": jinja2 rendered it, tracelm raised: " << got.error->what();
        EXPECT_EQ(got.text, golden["text"].get<std::string>()) << what;
        return;
    }
    ASSERT_TRUE(got.error) << what << ": jinja2 raised \"" << golden["error"].get<std::string>()
                           << "\", tracelm rendered: " << got.text;
    if (golden["raised"].get<bool>()) {
        EXPECT_EQ(got.error->kind(), jinja::Error::Kind::Raised) << what << ": " << got.error->what();
        EXPECT_EQ(got.error->message(), golden["error"].get<std::string>()) << what;
    }
}

TEST(JinjaGoldens, EveryRealTemplateRendersEveryConversationAsJinja2Does) {
    const ordered_json g = read_ordered_json("testdata/goldens/chat_templates.json");
    const auto now = g["fixed_now"].get<std::time_t>();
    std::map<std::string, const ordered_json*> conversations;
    for (const ordered_json& c : g["conversations"]) conversations[c["name"]] = &c;
    std::map<std::string, std::unique_ptr<jinja::Template>> templates;  // each parsed once, rendered many times
    std::set<std::string> rendered, raised;
    for (const ordered_json& c : g["cases"]) {
        const std::string name = c["template"];
        const ordered_json& conv = *conversations.at(c["conversation"]);
        const std::string what = name + " / " + c["conversation"].get<std::string>() +
                                 " / add_generation_prompt=" + c["add_generation_prompt"].dump();
        if (!templates.count(name)) {
            const std::string source = read_text("testdata/chat_templates/" + name + ".jinja");
            ASSERT_FALSE(source.empty()) << name;
            templates[name] = std::make_unique<jinja::Template>(source);
        }
        // The variables transformers passes: messages, tools and documents (None when absent),
        // add_generation_prompt, the special tokens the tokenizer has, then the extra keyword arguments.
        Variables vars = {{"messages", jinja::from_json(conv["messages"])},
                          {"tools", jinja::Value::none()},
                          {"documents", jinja::Value::none()},
                          {"add_generation_prompt", jinja::Value::boolean(c["add_generation_prompt"].get<bool>())}};
        for (const auto& [k, v] : g["templates"][name].items())
            if (!v.is_null()) vars.emplace_back(k, jinja::Value::string(v.get<std::string>()));
        for (const auto& [k, v] : conv["variables"].items()) {
            auto it = std::find_if(vars.begin(), vars.end(), [&](const auto& kv) { return kv.first == k; });
            if (it == vars.end()) {
                vars.emplace_back(k, jinja::from_json(v));
            } else {
                it->second = jinja::from_json(v);
            }
        }
        TemplateOutcome got;
        try {
            got.text = templates[name]->render(vars, now);
        } catch (const jinja::Error& e) {
            got.error = e;
        }
        expect_like_jinja2(c, got, what);
        (c.contains("text") ? rendered : raised).insert(name);
    }
    EXPECT_GE(g["cases"].size(), 300u);
    EXPECT_EQ(templates.size(), 16u);
    EXPECT_EQ(rendered.size(), 16u) << "every template renders some conversation";
    EXPECT_GE(raised.size(), 8u) << "and some templates refuse some conversations";
}

TEST(JinjaGoldens, EverySnippetRendersAsJinja2Does) {
    const ordered_json g = read_ordered_json("testdata/goldens/jinja_snippets.json");
    const auto now = g["fixed_now"].get<std::time_t>();
    EXPECT_GE(g["cases"].size(), 90u);
    for (const ordered_json& c : g["cases"]) {
        Variables vars;
        for (const auto& [k, v] : c["variables"].items()) vars.emplace_back(k, jinja::from_json(v));
        expect_like_jinja2(c, render(c["template"], vars, now), c["feature"].get<std::string>());
    }
}

}  // namespace
}  // namespace tracelm
