// What a chat request pays for its prompt text: rendering a model's Jinja chat template (ChatTemplate::apply, the
// request's JSON converted to template values included) over a 10-message conversation with two tools, and parsing
// the template (once per model). CMake builds it as build/bench_chat_template where Google Benchmark is installed:
//   build/bench_chat_template --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/chat_template.h"

namespace {

using nlohmann::ordered_json;
using tracelm::ChatInput;
using tracelm::ChatTemplate;

std::string read(const std::string& rel) {
    std::ifstream in(std::string(TRACELM_SOURCE_DIR) + "/" + rel, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string source(int which) {
    switch (which) {
        case 0: return ordered_json::parse(read("models/qwen3-tokenizer/tokenizer_config.json"))["chat_template"];
        case 1: return read("testdata/chat_templates/llama-3.1-8b-instruct.jinja");
        default: return read("testdata/chat_templates/gpt-oss-120b.jinja");
    }
}

const char* kNames[] = {"qwen3", "llama-3.1", "gpt-oss"};

ChatInput conversation() {
    ChatInput in;
    in.messages = ordered_json::parse(R"([
        {"role": "system", "content": "You are a helpful assistant. Answer briefly and call tools when useful."},
        {"role": "user", "content": "What's the weather like in Paris today, and should I take an umbrella?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "{\"temperature\": 21, \"rain_probability\": 0.1}"},
        {"role": "assistant", "content": "It is 21 degrees with a 10% chance of rain: no umbrella needed."},
        {"role": "user", "content": "Great. Find me a museum that is open late tonight."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call00002", "type": "function",
            "function": {"name": "search", "arguments": {"query": "Paris museums open late", "filters": []}}}]},
        {"role": "tool", "tool_call_id": "call00002", "content": "Musee d'Orsay: open until 21:45 on Thursdays."},
        {"role": "assistant", "content": "The Musee d'Orsay is open until 21:45 tonight."},
        {"role": "user", "content": "Thanks! How do I get there from the Eiffel Tower?"}])");
    in.tools = ordered_json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "search", "description": "Search the web.",
            "parameters": {"type": "object", "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "filters": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}}}])");
    return in;
}

void BM_ChatTemplateRender(benchmark::State& state) {
    const ChatTemplate t(source(static_cast<int>(state.range(0))), "<|begin_of_text|>", "<|eot_id|>", false);
    const ChatInput in = conversation();
    size_t bytes = 0;
    for (auto _ : state) {
        const std::string text = t.apply(in);
        bytes = text.size();
        benchmark::DoNotOptimize(text.data());
    }
    state.SetLabel(std::string(kNames[state.range(0)]) + ", " + std::to_string(bytes) + " bytes of prompt");
}
BENCHMARK(BM_ChatTemplateRender)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

void BM_ChatTemplateParse(benchmark::State& state) {
    const std::string text = source(static_cast<int>(state.range(0)));
    for (auto _ : state) {
        const ChatTemplate t(text, "<|begin_of_text|>", "<|eot_id|>", false);
        benchmark::DoNotOptimize(&t);
    }
    state.SetLabel(kNames[state.range(0)]);
}
BENCHMARK(BM_ChatTemplateParse)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
