// libFuzzer harness for the tool call parser (src/chat/tool_calls): the first byte picks a format and a piece size,
// the rest is model output. The output fed in those pieces must give the same content and calls as fed at once,
// an output without a call must come out unchanged as content, and nothing may crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_calls/tool_calls.h"

namespace {

using namespace tracelm::tools;

constexpr ToolCallFormat kFormats[] = {ToolCallFormat::Hermes,     ToolCallFormat::Llama3Json,
                                       ToolCallFormat::Mistral,    ToolCallFormat::MistralArgs,
                                       ToolCallFormat::DeepSeekR1, ToolCallFormat::Granite};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const ToolCallFormat format = kFormats[data[0] % std::size(kFormats)];
    const size_t piece = 1 + data[0] / std::size(kFormats);
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    const std::set<std::string> names = {"f", "get_weather", "search"};

    const ParsedOutput whole = parse_output(format, text, names);
    ToolCallParser p(format, names);
    std::string content;
    size_t calls = 0;
    const auto take = [&](const std::vector<ToolEvent>& events) {
        for (const ToolEvent& e : events) {
            if (const auto* c = std::get_if<std::string>(&e))
                content += *c;
            else
                ++calls;
        }
    };
    for (size_t at = 0; at < text.size(); at += piece) take(p.push(text.substr(at, piece)));
    take(p.finish());
    if (content != whole.content || calls != whole.calls.size()) std::abort();
    if (whole.calls.empty() && whole.content != text) std::abort();  // no call: the output is the content, unchanged
    return 0;
}
