// The token ids of a `tracelm chat` conversation across turns.
//
// A turn's prompt is the ids of the turns before it as they were computed (each prompt's ids, each reply's ids as
// sampled, its end-of-turn token included) followed by the encoding of the template text that comes after them; the
// replies are named as decoded spans. The engine then computes the conversation the way it was generated, so its
// prefix cache shares the KV of every earlier turn, replies included, and only the new turn is prefilled
// (docs/prefix-cache.md). When the template's text of the conversation does not begin with the text of those ids
// (a template that rewrites earlier turns), the whole conversation is encoded and computed afresh.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace tracelm {

class ChatSession {
   public:
    ChatSession(const Tokenizer& tok, ChatTemplate tmpl, const std::string& system);

    struct Prompt {
        std::vector<int32_t> ids;
        std::vector<TokenSpan> decoded;  // the earlier replies
        bool reencoded = false;          // earlier turns were encoded afresh (the template rewrote them)
    };
    // Adds the user's message; returns the prompt that asks for the assistant's reply. Throws ChatTemplateError
    // (and keeps the conversation as it was) when the template refuses it.
    Prompt user(const std::string& message);
    // Adds the assistant's reply to the last prompt: the ids sampled for it (the end-of-turn token included, when
    // the reply has one) and its text as the conversation keeps it.
    void assistant(const std::vector<int32_t>& sampled, const std::string& content);

   private:
    const Tokenizer& tok_;
    ChatTemplate tmpl_;
    nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
    std::vector<int32_t> ids_;          // the last prompt, then its reply
    std::string text_;                  // the text ids_ stand for: the prompt's text, then the reply's decoding
    std::vector<TokenSpan> decoded_;    // the replies in ids_
};

}  // namespace tracelm
