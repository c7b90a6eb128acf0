// What a tool-call parser gives out: content text and complete calls, in output order.
#pragma once

#include <string>
#include <variant>

namespace tracelm::tools {

struct ToolCall {
    std::string name;
    std::string arguments;  // JSON text of an object
};

// A piece of the parsed output, in output order.
using ToolEvent = std::variant<std::string, ToolCall>;  // content text, or a complete call

}  // namespace tracelm::tools
