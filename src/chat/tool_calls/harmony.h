// gpt-oss's harmony output: a sequence of messages, each `<|start|>assistant` (left out of the first one, which the
// chat template's generation prompt opened), a header naming its channel and maybe a recipient, `<|message|>`, its
// text, and `<|end|>`, `<|return|>` or `<|call|>` (the last two are end-of-generation tokens, so an answer usually
// ends without them). As OpenAI's harmony guide describes it:
//   <|channel|>analysis<|message|>chain of thought<|end|>
//   <|start|>assistant<|channel|>final<|message|>the answer<|return|>
//   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{"arg": 1}<|call|>
// The recipient may also stand in the role part (`<|start|>assistant to=functions.NAME<|channel|>commentary json`),
// as gpt-oss's chat template renders past calls.
//
// The answer's content is the text of the `final` channel and of `commentary` messages without a recipient
// (preambles, which the guide shows to users), streamed as it arrives; `analysis` (the chain of thought, which the
// guide says must not reach users) and every other channel are dropped. A message to `functions.NAME` is a call
// when NAME was offered and its text is a JSON object; otherwise the message goes out unchanged as content. Text
// before any header (a model that writes no harmony) is content.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_calls/tool_event.h"

namespace tracelm::tools {

class HarmonyParser {
   public:
    // names: the functions offered; calls past max_calls are dropped.
    HarmonyParser(std::set<std::string> names, size_t max_calls);

    void push(std::string_view text, std::vector<ToolEvent>& out);
    // The end of the output: the open message ends here (a call whose text is a whole JSON object counts).
    void finish(std::vector<ToolEvent>& out);
    size_t calls() const { return calls_; }

   private:
    enum class Kind { Content, Hidden, Call };
    // What a header (the text before <|message|>) makes of its message.
    void open_message(std::string_view header);
    void close_message(std::string_view body, std::string_view close, std::vector<ToolEvent>& out);
    bool scan_header(std::vector<ToolEvent>& out, bool at_end);
    bool scan_body(std::vector<ToolEvent>& out, bool at_end);

    std::set<std::string> names_;
    size_t max_calls_;
    size_t calls_ = 0;
    bool in_body_ = false;
    Kind kind_ = Kind::Content;
    std::string header_;     // the open message's header, as written (a refused call goes out with it)
    std::string recipient_;  // the open message's, "" when none
    std::string pending_;    // received, not yet given out or dropped
    size_t scanned_ = 0;     // pending_ before this holds no marker start (searches resume here)
};

}  // namespace tracelm::tools
