#include "chat/chat_template.h"

#include <stdexcept>

#include "runtime/untrusted.h"

namespace tracelm {

namespace {

// Jinja string literals may hold a newline as the character or as the escape "\n".
std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'n') {
            out += '\n';
            ++i;
        } else {
            out += s[i];
        }
    }
    return out;
}

// A constant system prompt written in a string literal right after "<|im_start|>system" (SmolLM2,
// Qwen2.5); templates that splice in the first message's content instead have none.
std::string chatml_default_system(const std::string& t) {
    const std::string head = "<|im_start|>system";
    for (size_t at = t.find(head); at != std::string::npos; at = t.find(head, at + 1)) {
        size_t p = at + head.size();
        if (t.compare(p, 1, "\n") == 0) {
            p += 1;
        } else if (t.compare(p, 2, "\\n") == 0) {
            p += 2;
        } else {
            continue;
        }
        const size_t end = t.find("<|im_end|>", p);
        if (end == std::string::npos) continue;
        const std::string text = t.substr(p, end - p);
        if (text.empty() || text.find_first_of("'\"{}") != std::string::npos) continue;
        return unescape(text);
    }
    return "";
}

std::string trim(const std::string& s) {
    const char* ws = " \t\n\r";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

ChatTemplate ChatTemplate::detect(const std::string& t) {
    if (t.empty()) throw std::runtime_error("the model has no chat template");
    if (t.find("<|im_start|>") != std::string::npos) return ChatTemplate(Style::ChatML, chatml_default_system(t));
    if (t.find("<|start_header_id|>") != std::string::npos) return ChatTemplate(Style::Llama3, "");
    throw std::runtime_error("unknown chat template (supported: ChatML as in Qwen and SmolLM2, Llama 3); it begins: " +
                             untrusted::escape(t, 80));
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
    std::string out;
    if (style_ == Style::ChatML) {
        if (!default_system_.empty() && (messages.empty() || messages.front().role != "system"))
            out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
        for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        if (add_generation_prompt) out += "<|im_start|>assistant\n";
    } else {
        // Llama 3 trims each message's content.
        for (const ChatMessage& m : messages)
            out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
        if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    }
    return out;
}

}  // namespace tracelm
