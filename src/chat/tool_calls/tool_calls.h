// Tool calls in a model's output: which syntax a model writes them in (detected from its chat template), an
// incremental parser that splits the output into content and OpenAI-shaped calls, and the text a forced call must
// take (the seam for constrained decoding). Pure text and JSON: no tokenizer, no server.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_calls/harmony.h"
#include "chat/tool_calls/tool_event.h"

namespace tracelm::tools {

enum class ToolCallFormat {
    None,        // no known syntax: output stays content
    Hermes,      // Qwen2.5 / Qwen3 / Hermes / SmolLM3: <tool_call>\n{"name", "arguments"}\n</tool_call>, repeated
    Llama3Json,  // Llama 3.1-3.3: {"name", "parameters"} at the start of the answer or after <|python_tag|>; "; "
    Mistral,     // [TOOL_CALLS][{"name", "arguments"}, ...] (up to v7 tokenizers)
    MistralArgs, // [TOOL_CALLS]name[ARGS]{...} (v11+), repeated; either Mistral form parses as either
    DeepSeekR1,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```...
    Granite,     // <|tool_call|>[{"name", "arguments"}, ...]
    Harmony,     // gpt-oss: channels, <|channel|>commentary to=functions.NAME ...<|message|>{...} (harmony.h)
};

const char* format_name(ToolCallFormat f);

// The format a chat template's text asks the model for, from the markers it writes (as llama.cpp's common/chat.cpp
// and vLLM's parser choice tell models apart). None when it shows no known one.
ToolCallFormat detect_format(std::string_view template_source);

// The markers of the format that tokenizers often hold as special tokens ([TOOL_CALLS], <|python_tag|>, ...): a
// server decoding the output must keep these in the text it parses.
std::vector<std::string> marker_tokens(ToolCallFormat f);

// A new call id: "call_" and 24 alphanumerics, or 9 alphanumerics for Mistral (its templates refuse other ids).
std::string new_call_id(ToolCallFormat f, std::mt19937_64& rng);

// Splits model output into content and tool calls as it arrives. A call block (from its opening marker to its
// closing one, or to the end of the output for formats without one) is held until complete and then either becomes
// calls or, when it does not parse (bad JSON, a function not offered, a missing name), goes out unchanged as
// content. Whitespace next to a parsed block is dropped. Text that could be the start of a marker is held back until
// it is known. Feeding the output in any pieces gives the same events' concatenation; every byte is scanned a
// bounded number of times, and each block's body is parsed once.
class ToolCallParser {
   public:
    // names: the functions offered (a call of another is content). max_calls: calls past it are dropped (1 for
    // parallel_tool_calls false).
    ToolCallParser(ToolCallFormat format, std::set<std::string> names, size_t max_calls = SIZE_MAX);

    std::vector<ToolEvent> push(std::string_view text);
    // The end of the output: an open block is parsed as it is (a truncated one goes out as content).
    std::vector<ToolEvent> finish();

    size_t calls() const { return harmony_ ? harmony_->calls() : calls_; }

   private:
    void scan(std::vector<ToolEvent>& out, bool at_end);
    bool scan_content(std::vector<ToolEvent>& out, bool at_end);
    bool scan_block(std::vector<ToolEvent>& out, bool at_end);
    void close_block(std::string_view body, std::string_view close, std::vector<ToolEvent>& out);
    void emit_content(std::string_view text, std::vector<ToolEvent>& out);

    ToolCallFormat format_;
    std::set<std::string> names_;
    size_t max_calls_;
    std::string open_;               // the marker that starts a block
    std::string close_;              // the marker that ends one; empty: the end of the output
    std::string pending_;            // received, not yet given out
    size_t scanned_ = 0;             // pending_ before this holds no marker start (searches resume here)
    bool in_block_ = false;
    std::string block_open_;         // the marker that opened the current block, and the whitespace before it
    std::string ws_before_;
    bool after_block_ = false;       // whitespace right after a parsed block is dropped
    bool seen_text_ = false;         // non-whitespace content went out (Llama's bare '{' opens only before that)
    size_t calls_ = 0;
    std::optional<HarmonyParser> harmony_;  // the Harmony format's own parser (its output is messages, not blocks)
};

// Content and calls of a complete output (the parser fed it at once).
struct ParsedOutput {
    std::string content;
    std::vector<ToolCall> calls;
};
ParsedOutput parse_output(ToolCallFormat format, std::string_view text, const std::set<std::string>& names,
                          size_t max_calls = SIZE_MAX);

// What a forced call (tool_choice "required" or a named function) must look like in this format: one alternative
// per allowed function, each the literal text `prefix`, then JSON valid against `schema` (the function's parameters),
// then `suffix`. Markers in prefix/suffix may be special tokens of the model (marker_tokens). tools: the request's
// validated tools; name empty: any of them. Empty for ToolCallFormat::None.
struct ForcedCallForm {
    std::string name, prefix, suffix;
    nlohmann::ordered_json schema;
};
std::vector<ForcedCallForm> forced_call_forms(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                              const std::string& name = "");

// The text between two calls where the format writes several as repeated blocks (Hermes, Llama 3.x, Mistral);
// nullopt where several calls share one block (Granite's and DeepSeek-R1's lists) or a call ends generation
// (Harmony's <|call|>): a forced answer then holds one.
std::optional<std::string> call_separator(ToolCallFormat format);

}  // namespace tracelm::tools
