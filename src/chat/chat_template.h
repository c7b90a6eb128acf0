// Chat prompt formatting for the template families tracelm knows: ChatML (Qwen, SmolLM2, ...) and
// Llama 3. A model's Jinja chat template is recognised by its markers, not executed; a template of
// another family is refused with a clear message rather than formatted wrongly.
#pragma once

#include <string>
#include <vector>

namespace tracelm {

struct ChatMessage {
    std::string role;  // "system", "user", "assistant"
    std::string content;
};

class ChatTemplate {
   public:
    enum class Style { ChatML, Llama3 };

    // Throws std::runtime_error when the template is empty or of an unknown family.
    static ChatTemplate detect(const std::string& jinja_template);

    Style style() const { return style_; }
    // The system message the template inserts when a conversation has none (may be empty).
    const std::string& default_system() const { return default_system_; }
    // The prompt text for `messages`, ending with the assistant's header when add_generation_prompt.
    // Without a BOS token: the tokenizer's add_bos_token decides about that.
    std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;

   private:
    ChatTemplate(Style style, std::string default_system)
        : style_(style), default_system_(std::move(default_system)) {}
    Style style_;
    std::string default_system_;
};

}  // namespace tracelm
