// Tool calls in model output (chat/tool_calls/tool_calls.h): real outputs of each format
// (testdata/tool_calls/outputs.json, sources named there) parsed into content and calls, the same result for every
// way of cutting the output into pieces, bounded work on hostile output, the format each real chat template asks
// for, and forced-call forms that parse back to the call they force.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/tool_calls/tool_calls.h"
#include "support/test_support.h"

namespace tracelm::tools {
namespace {

using nlohmann::ordered_json;

constexpr ToolCallFormat kFormats[] = {ToolCallFormat::Hermes,     ToolCallFormat::Llama3Json,
                                       ToolCallFormat::Mistral,    ToolCallFormat::MistralArgs,
                                       ToolCallFormat::DeepSeekR1, ToolCallFormat::Granite,
                                       ToolCallFormat::Harmony};

ToolCallFormat format_named(const std::string& name) {
    for (ToolCallFormat f : kFormats)
        if (name == format_name(f)) return f;
    ADD_FAILURE() << "no format " << name;
    return ToolCallFormat::None;
}

const ordered_json& fixtures() {
    static const ordered_json doc = [] {
        std::ifstream in(testing::repo_path("testdata/tool_calls/outputs.json"));
        return ordered_json::parse(in);
    }();
    return doc["cases"];
}

// The events of `text` fed in the pieces that `cuts` (increasing offsets) make, adjacent content merged.
std::vector<ToolEvent> feed(ToolCallParser& p, const std::string& text, const std::vector<size_t>& cuts) {
    std::vector<ToolEvent> all;
    size_t at = 0;
    const auto add = [&](std::vector<ToolEvent> events) {
        for (ToolEvent& e : events) {
            if (std::holds_alternative<std::string>(e) && !all.empty() &&
                std::holds_alternative<std::string>(all.back()))
                std::get<std::string>(all.back()) += std::get<std::string>(e);
            else
                all.push_back(std::move(e));
        }
    };
    for (size_t cut : cuts) {
        add(p.push(std::string_view(text).substr(at, cut - at)));
        at = cut;
    }
    add(p.push(std::string_view(text).substr(at)));
    add(p.finish());
    return all;
}

std::string describe(const std::vector<ToolEvent>& events) {
    std::string s;
    for (const ToolEvent& e : events) {
        if (const auto* c = std::get_if<std::string>(&e))
            s += "[content " + ordered_json(*c).dump() + "]";
        else
            s += "[call " + std::get<ToolCall>(e).name + " " + std::get<ToolCall>(e).arguments + "]";
    }
    return s;
}

std::set<std::string> names_of(const ordered_json& c) { return c["tools"].get<std::set<std::string>>(); }

TEST(ToolCalls, RealOutputsParseToTheirCallsAndContent) {
    ASSERT_GE(fixtures().size(), 30u);
    for (const ordered_json& c : fixtures()) {
        SCOPED_TRACE(c["name"].get<std::string>());
        const ParsedOutput r = parse_output(format_named(c["format"]), c["output"].get<std::string>(), names_of(c));
        const ordered_json& want = c["expected"];
        EXPECT_EQ(r.content, want["content"].is_null() ? "" : want["content"].get<std::string>());
        ASSERT_EQ(r.calls.size(), want["calls"].size());
        for (size_t i = 0; i < r.calls.size(); ++i) {
            EXPECT_EQ(r.calls[i].name, want["calls"][i]["name"]);
            // arguments are JSON text of the same object (compared as values: key order and spacing aside)
            EXPECT_EQ(ordered_json::parse(r.calls[i].arguments), want["calls"][i]["arguments"]);
        }
    }
}

TEST(ToolCalls, EveryCutGivesTheSameEvents) {
    for (const ordered_json& c : fixtures()) {
        SCOPED_TRACE(c["name"].get<std::string>());
        const std::string text = c["output"];
        const ToolCallFormat f = format_named(c["format"]);
        ToolCallParser whole(f, names_of(c));
        const std::string want = describe(feed(whole, text, {}));
        for (size_t i = 0; i <= text.size(); ++i) {
            ToolCallParser p(f, names_of(c));
            ASSERT_EQ(describe(feed(p, text, {i})), want) << "cut at " << i;
        }
        for (size_t i = 0; i + 7 <= text.size(); i += 3) {  // three pieces
            ToolCallParser p(f, names_of(c));
            ASSERT_EQ(describe(feed(p, text, {i, i + 7})), want) << "cuts at " << i << ", " << i + 7;
        }
        std::vector<size_t> bytes;
        for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
        ToolCallParser p(f, names_of(c));
        EXPECT_EQ(describe(feed(p, text, bytes)), want) << "byte by byte";
    }
}

TEST(ToolCalls, ContentIsNeverAMarkerOrAHeldCall) {
    // While a call is being assembled nothing of it goes out; the text before it does, and whitespace around it
    // does not.
    ToolCallParser p(ToolCallFormat::Hermes, {"f"});
    EXPECT_EQ(describe(p.push("Checking. <tool")), "[content \"Checking.\"]");
    EXPECT_EQ(describe(p.push("_call>\n{\"name\": \"f\", \"argu")), "");
    EXPECT_EQ(describe(p.push("ments\": {}}\n</tool_call>\n\n")), "[call f {}]");
    EXPECT_EQ(describe(p.finish()), "");
}

TEST(ToolCalls, ParallelFalseKeepsTheFirstCall) {
    const std::string text = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"
                             "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
    const ParsedOutput r = parse_output(ToolCallFormat::Hermes, text, {"a", "b"}, 1);
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "a");
    EXPECT_EQ(r.content, "");
}

TEST(ToolCalls, HostileOutputStaysLinear) {
    // Marker prefixes, whitespace and an endless open block, fed a byte at a time: a quadratic scan would take
    // minutes here.
    for (const std::string& unit : {std::string("<tool_ca"), std::string(" \n "), std::string("<tool_call>{{{{\"")}) {
        std::string text;
        while (text.size() < (1u << 20)) text += unit;
        const auto t0 = std::chrono::steady_clock::now();
        ToolCallParser p(ToolCallFormat::Hermes, {"f"});
        size_t out = 0;
        for (char ch : text)
            for (const ToolEvent& e : p.push(std::string_view(&ch, 1)))
                if (const auto* s = std::get_if<std::string>(&e)) out += s->size();
        for (const ToolEvent& e : p.finish())
            if (const auto* s = std::get_if<std::string>(&e)) out += s->size();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_LT(s, 10.0) << unit;
        EXPECT_EQ(out, text.size()) << unit;  // none of it was a call: all of it is content
    }
}

// Harmony: the final channel streams as it arrives (only a tail that may begin a closing marker is held), the
// chain of thought never goes out, and a call is held until it closes or the output ends.
TEST(ToolCalls, HarmonyStreamsTheFinalChannelAndHidesTheAnalysis) {
    ToolCallParser p(ToolCallFormat::Harmony, {"f"});
    EXPECT_EQ(describe(p.push("<|channel|>analysis<|message|>secret thoughts")), "");
    EXPECT_EQ(describe(p.push(" more<|end|><|start|>assistant<|channel|>final<|message|>Hel")), "[content \"Hel\"]");
    EXPECT_EQ(describe(p.push("lo <|re")), "[content \"lo \"]");
    EXPECT_EQ(describe(p.push("turn|>")), "");
    EXPECT_EQ(describe(p.finish()), "");

    ToolCallParser call(ToolCallFormat::Harmony, {"f"});
    EXPECT_EQ(describe(call.push("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\"")), "");
    EXPECT_EQ(describe(call.push(": 1}")), "");
    EXPECT_EQ(describe(call.finish()), "[call f {\"a\":1}]");  // <|call|> ended generation: never delivered

    // A call past max_calls is dropped; without harmony a '<' that is not a marker is text.
    EXPECT_EQ(parse_output(ToolCallFormat::Harmony,
                           "<|channel|>commentary to=functions.f<|message|>{}<|end|>"
                           "<|start|>assistant<|channel|>commentary to=functions.f<|message|>{}<|call|>",
                           {"f"}, 1)
                  .calls.size(),
              1u);
    EXPECT_EQ(parse_output(ToolCallFormat::Harmony, "a < b", {}).content, "a < b");
}

TEST(ToolCalls, HostileHarmonyStaysLinear) {
    // A header that never reaches <|message|>, marker prefixes in the final channel and an endless call, fed a byte
    // at a time.
    for (const auto& [head, unit] :
         {std::pair<std::string, std::string>{"<|channel|>", "<|messa"},
          {"<|channel|>final<|message|>", "x<|re"},
          {"<|channel|>commentary to=functions.f<|message|>", "{{\"<|ca"}}) {
        std::string text = head;
        while (text.size() < (1u << 20)) text += unit;
        const auto t0 = std::chrono::steady_clock::now();
        ToolCallParser p(ToolCallFormat::Harmony, {"f"});
        for (char ch : text) p.push(std::string_view(&ch, 1));
        p.finish();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_LT(s, 10.0) << head;
    }
}

TEST(ToolCalls, EachRealTemplateIsDetected) {
    const std::pair<const char*, ToolCallFormat> want[] = {
        {"qwen3", ToolCallFormat::Hermes},
        {"qwen2.5-7b-instruct", ToolCallFormat::Hermes},
        {"hermes-3-llama-3.1-8b-tool-use", ToolCallFormat::Hermes},
        {"llama-3.1-8b-instruct", ToolCallFormat::Llama3Json},
        {"llama-3.2-3b-instruct", ToolCallFormat::Llama3Json},
        {"llama-3.3-70b-instruct", ToolCallFormat::Llama3Json},
        {"mistral-nemo-instruct-2407", ToolCallFormat::Mistral},
        {"mistral-small-3.2-24b-instruct-2506", ToolCallFormat::MistralArgs},
        {"deepseek-r1-distill-qwen-32b", ToolCallFormat::DeepSeekR1},
        {"granite-3.3-2b-instruct", ToolCallFormat::Granite},
        {"gpt-oss-120b", ToolCallFormat::Harmony},
        {"smollm2-135m-instruct", ToolCallFormat::None},
        {"gemma-3-it", ToolCallFormat::None},
        {"phi-4", ToolCallFormat::None},
    };
    for (const auto& [name, format] : want) {
        std::ifstream in(testing::repo_path(std::string("testdata/chat_templates/") + name + ".jinja"));
        const std::string src((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        ASSERT_FALSE(src.empty()) << name;
        EXPECT_EQ(format_name(detect_format(src)), std::string(format_name(format))) << name;
    }
}

TEST(ToolCalls, ForcedFormsParseBackToTheirCall) {
    const ordered_json tools = ordered_json::parse(R"([
        {"type": "function", "function": {"name": "get_weather",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "ping"}}])");
    const ordered_json args = {{"city", "Paris"}};
    for (ToolCallFormat f : kFormats) {
        SCOPED_TRACE(format_name(f));
        const auto all = forced_call_forms(f, tools);
        ASSERT_EQ(all.size(), 2u);
        EXPECT_EQ(all[1].schema, ordered_json({{"type", "object"}}));
        const auto forms = forced_call_forms(f, tools, "get_weather");
        ASSERT_EQ(forms.size(), 1u);
        EXPECT_EQ(forms[0].schema, tools[0]["function"]["parameters"]);
        const ParsedOutput r =
            parse_output(f, forms[0].prefix + args.dump() + forms[0].suffix, {"get_weather", "ping"});
        ASSERT_EQ(r.calls.size(), 1u);
        EXPECT_EQ(r.calls[0].name, "get_weather");
        EXPECT_EQ(ordered_json::parse(r.calls[0].arguments), args);
        EXPECT_EQ(r.content, "");
        // Repeated blocks joined by the format's separator are each a call.
        if (const auto sep = call_separator(f)) {
            const std::string two = all[0].prefix + args.dump() + all[0].suffix + *sep + all[1].prefix + "{}" +
                                    all[1].suffix;
            const ParsedOutput both = parse_output(f, two, {"get_weather", "ping"});
            ASSERT_EQ(both.calls.size(), 2u) << two;
            EXPECT_EQ(both.calls[1].name, "ping");
            EXPECT_EQ(both.content, "");
        }
    }
    EXPECT_TRUE(forced_call_forms(ToolCallFormat::None, tools).empty());
    EXPECT_FALSE(call_separator(ToolCallFormat::Granite).has_value());
}

TEST(ToolCalls, CallIdsAreRandomAndShapedForTheFormat) {
    std::mt19937_64 rng(1);
    const std::string a = new_call_id(ToolCallFormat::Hermes, rng), b = new_call_id(ToolCallFormat::Hermes, rng);
    EXPECT_EQ(a.rfind("call_", 0), 0u);
    EXPECT_EQ(a.size(), 29u);
    EXPECT_NE(a, b);
    EXPECT_EQ(new_call_id(ToolCallFormat::MistralArgs, rng).size(), 9u);  // Mistral's templates check the length
}

}  // namespace
}  // namespace tracelm::tools
