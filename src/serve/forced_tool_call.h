// A forced tool call (tool_choice "required" or a named function) as a constraint on the answer: the model's
// tool-call format, one alternative per allowed function with its parameters as a JSON schema, written as xgrammar's
// structural tag and then compiled and matched per row like any response_format (docs/structured-output.md).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "chat/tool_calls/tool_calls.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace tracelm::serve {

// The constraint of an answer that must be tool calls: one call of `name` (empty: of any offered tool), or with
// `parallel` one or more calls where the format writes several as repeated blocks (tools::call_separator). Markers
// the tokenizer holds as special tokens are matched as those tokens. tools: the request's validated tools. Throws
// grammar::GrammarError naming the function whose parameters are not a supported schema.
grammar::Spec forced_call_constraint(const Tokenizer& tokenizer, tools::ToolCallFormat format,
                                     const nlohmann::ordered_json& tools, const std::string& name, bool parallel);

}  // namespace tracelm::serve
