// A model's chat template: its own Jinja template (tokenizer_config.json's chat_template or the GGUF key
// tokenizer.chat_template, or a file given instead), parsed once and rendered per request the way Hugging Face's
// apply_chat_template renders it (chat/jinja/template.h), with the variables it passes: messages, tools,
// documents, add_generation_prompt, the tokenizer's bos_token and eos_token, and extra keyword arguments
// (chat_template_kwargs, such as Qwen3's enable_thinking).
#pragma once

#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "chat/jinja/limits.h"
#include "chat/jinja/template.h"
#include "tokenizer/tokenizer.h"

namespace tracelm {

// What a render reads. Messages are passed through as given: role, content (a string or a list of parts),
// tool_calls, tool_call_id, name, reasoning_content, ...
struct ChatInput {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;      // null: no tools (the template sees None, as transformers passes)
    nlohmann::ordered_json documents;  // null: no documents
    nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // further variables; they win over the above
    bool add_generation_prompt = true;
    // The text ends right after the last message's content (transformers' continue_final_message), so that the
    // model goes on with that message rather than after its end.
    bool continue_final_message = false;
    // Tool calls' function.arguments are JSON text, as OpenAI's API sends them: each reaches the template as the
    // object it holds (what transformers documents and vLLM converts to), unless the template only works with the
    // text (one that concatenates it to a string).
    bool arguments_as_json_text = false;
    std::optional<std::time_t> now;  // the time strftime_now reads (UTC); default: the local time
};

// The template failed while rendering: its own raise_exception, an operation Python would refuse, or a limit.
// what() is the template's message with its line.
struct ChatTemplateError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class ChatTemplate {
   public:
    // bos_token / eos_token: the tokenizer's token strings (nullopt: it has none, and the template does not see
    // the variable). strip_bos: the tokenizer puts BOS in front of the prompt itself, so a BOS the template writes
    // at the start of its text is removed, as llama.cpp's server does: the prompt starts with one BOS either way.
    // Throws std::runtime_error naming the template's syntax error.
    ChatTemplate(const std::string& source, std::optional<std::string> bos_token, std::optional<std::string> eos_token,
                 bool strip_bos, const jinja::Limits& limits = {});

    // `source` (when not empty) or else the tokenizer's own template, with the tokenizer's BOS and EOS. Throws
    // std::runtime_error when there is neither or it does not parse.
    static ChatTemplate for_tokenizer(const Tokenizer& tok, const std::string& source = "");

    // The prompt text. A template that never loops over a message's content gets list contents as their text parts
    // joined by newlines (as vLLM does for such templates); others get the list as it is. Throws
    // ChatTemplateError (also when continue_final_message is set and the text does not hold the last message's).
    std::string apply(const ChatInput& input) const;

    bool takes_content_parts() const { return content_parts_; }
    // Whether tool call arguments reach the template as objects (found by rendering a probe call both ways).
    bool takes_object_arguments() const { return object_arguments_; }

   private:
    std::string apply_as_given(const ChatInput& input) const;

    jinja::Template template_;
    std::optional<std::string> bos_, eos_;
    bool strip_bos_;
    bool content_parts_;
    bool object_arguments_ = true;
};

}  // namespace tracelm
