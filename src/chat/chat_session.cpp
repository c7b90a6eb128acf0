#include "chat/chat_session.h"

#include "engine/prompt.h"

namespace tracelm {

ChatSession::ChatSession(const Tokenizer& tok, ChatTemplate tmpl, const std::string& system)
    : tok_(tok), tmpl_(std::move(tmpl)) {
    if (!system.empty()) messages_.push_back({{"role", "system"}, {"content", system}});
}

ChatSession::Prompt ChatSession::user(const std::string& message) {
    ChatInput input;
    input.messages = messages_;
    input.messages.push_back({{"role", "user"}, {"content", message}});
    const std::string text = tmpl_.apply(input);
    messages_ = std::move(input.messages);
    Prompt p;
    if (!ids_.empty() && text.size() > text_.size() && text.compare(0, text_.size(), text_) == 0) {
        // The earlier turns' ids stay as they were computed; the text after them is the new turn.
        p.ids = ids_;
        const std::vector<int32_t> rest = tok_.encode(std::string_view(text).substr(text_.size()));
        p.ids.insert(p.ids.end(), rest.begin(), rest.end());
        p.decoded = decoded_;
    } else {
        p.reencoded = !ids_.empty();
        p.ids = encode_prompt(tok_, text);
    }
    ids_ = p.ids;
    text_ = text;
    decoded_ = p.decoded;
    return p;
}

void ChatSession::assistant(const std::vector<int32_t>& sampled, const std::string& content) {
    if (!sampled.empty()) {
        const auto at = static_cast<int64_t>(ids_.size());
        decoded_.push_back({at, at + static_cast<int64_t>(sampled.size())});
        ids_.insert(ids_.end(), sampled.begin(), sampled.end());
        text_ += tok_.decode(sampled);
    }
    messages_.push_back({{"role", "assistant"}, {"content", content}});
}

}  // namespace tracelm
