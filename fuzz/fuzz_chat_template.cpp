// libFuzzer harness for chat templates (src/chat/jinja): any input either parses or throws jinja::Error, and a parsed
// template renders a fixed conversation with tools, or throws jinja::Error, within small limits (so that every input
// ends quickly): never a crash, hang, leak or sanitizer report.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja/error.h"
#include "chat/jinja/json.h"
#include "chat/jinja/template.h"

namespace {

using tracelm::jinja::Value;

std::vector<std::pair<std::string, Value>> variables() {
    const auto j = nlohmann::ordered_json::parse(R"({
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9 {{ x }}"},
                     {"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
                      "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 2.5]}}}]},
                     {"role": "tool", "tool_call_id": "call00001", "content": "ok"},
                     {"role": "user", "content": [{"type": "text", "text": "parts"}]}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                   "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}],
        "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
        "enable_thinking": false})");
    std::vector<std::pair<std::string, Value>> vars;
    for (const auto& [k, v] : j.items()) vars.emplace_back(k, tracelm::jinja::from_json(v));
    return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::vector<std::pair<std::string, Value>> vars = variables();
    tracelm::jinja::Limits limits;
    limits.max_steps = 200'000;
    limits.max_loop_iterations = 20'000;
    limits.max_output_bytes = size_t{1} << 20;
    limits.max_allocated_bytes = size_t{32} << 20;
    try {
        const tracelm::jinja::Template t(std::string_view(reinterpret_cast<const char*>(data), size), limits);
        (void)t.render(vars, 1736944496);
    } catch (const tracelm::jinja::Error&) {
    }
    return 0;
}
