#include "chat/chat_template.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "chat/jinja/ast_walk.h"
#include "chat/jinja/error.h"
#include "chat/jinja/json.h"
#include "runtime/untrusted.h"

namespace tracelm {

namespace {

using nlohmann::ordered_json;

// x.content or x['content'], under any filters.
bool is_content_access(const jinja::Expr* e) {
    while (e && e->kind == jinja::Expr::Kind::Filter) e = static_cast<const jinja::FilterExpr*>(e)->value.get();
    if (!e) return false;
    if (e->kind == jinja::Expr::Kind::GetAttr) return static_cast<const jinja::GetAttrExpr*>(e)->name == "content";
    if (e->kind != jinja::Expr::Kind::GetItem) return false;
    const jinja::Expr& index = *static_cast<const jinja::GetItemExpr*>(e)->index;
    if (index.kind != jinja::Expr::Kind::Literal) return false;
    const jinja::Value& v = static_cast<const jinja::LiteralExpr&>(index).value;
    return v.is_string() && v.str() == "content";
}

// Whether a for loop walks a message's content (directly, or through a variable set from it): vLLM's test for a
// template that takes content as a list of parts.
bool loops_over_content(const jinja::Body& body) {
    std::set<std::string> content_names;
    jinja::walk(
        body,
        [&](const jinja::Stmt& s) {
            if (s.kind != jinja::Stmt::Kind::Set) return;
            const auto& set = static_cast<const jinja::SetStmt&>(s);
            if (set.target.attribute.empty() && !set.target.tuple && is_content_access(set.value.get()))
                content_names.insert(set.target.names[0]);
        },
        [](const jinja::Expr&) {});
    bool found = false;
    jinja::walk(
        body,
        [&](const jinja::Stmt& s) {
            if (s.kind != jinja::Stmt::Kind::For) return;
            const jinja::Expr* it = static_cast<const jinja::ForStmt&>(s).iterable.get();
            while (it && it->kind == jinja::Expr::Kind::Filter)
                it = static_cast<const jinja::FilterExpr*>(it)->value.get();
            found |= is_content_access(it) ||
                     (it && it->kind == jinja::Expr::Kind::Name &&
                      content_names.count(static_cast<const jinja::NameExpr*>(it)->name) > 0);
        },
        [](const jinja::Expr&) {});
    return found;
}

// A message whose content is a list of parts, with the text parts joined by newlines.
ordered_json joined_parts(const ordered_json& message) {
    const auto content = message.find("content");
    if (content == message.end() || !content->is_array()) return message;
    std::string text;
    bool first = true;
    for (const ordered_json& part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
            continue;
        if (!first) text += '\n';
        first = false;
        text += part["text"].get<std::string>();
    }
    ordered_json out = message;
    out["content"] = text;
    return out;
}

// The messages with each tool call's function.arguments, when it is JSON text, parsed into what it holds ("" as {}).
ordered_json object_arguments(const ordered_json& messages) {
    ordered_json out = messages;
    for (ordered_json& m : out) {
        if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
        for (ordered_json& call : m["tool_calls"]) {
            if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
            ordered_json& fn = call["function"];
            if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
            const std::string text = fn["arguments"].get<std::string>();
            if (text.empty()) {
                fn["arguments"] = ordered_json::object();
                continue;
            }
            try {
                fn["arguments"] = untrusted::parse_ordered_json(text);
            } catch (const std::exception&) {
                // not JSON: the template gets the text
            }
        }
    }
    return out;
}

bool has_tool_calls(const ordered_json& messages) {
    return std::any_of(messages.begin(), messages.end(),
                       [](const ordered_json& m) { return m.is_object() && m.contains("tool_calls"); });
}

// The text of a message to continue: its content, or its last text part (transformers' choice).
std::string final_text(const ordered_json& messages) {
    if (messages.empty() || !messages.back().is_object())
        throw ChatTemplateError("continue_final_message: there is no final message");
    const auto content = messages.back().find("content");
    if (content != messages.back().end() && content->is_string()) return content->get<std::string>();
    if (content != messages.back().end() && content->is_array())
        for (auto part = content->rbegin(); part != content->rend(); ++part)
            if (part->is_object() && part->contains("text") && (*part)["text"].is_string())
                return (*part)["text"].get<std::string>();
    throw ChatTemplateError("continue_final_message: the final message has no text to continue");
}

// transformers' continue_final_message: the text is cut right after the last occurrence of the final message's
// content. A template may strip the content's surrounding whitespace; then the cut goes after the stripped text,
// else after the content as written (transformers compares the same way).
std::string cut_after_final_message(std::string text, const ordered_json& messages) {
    const std::string content = final_text(messages);
    static constexpr const char* kSpace = " \t\n\r\f\v";
    const size_t first = content.find_first_not_of(kSpace);
    const std::string lstripped = first == std::string::npos ? "" : content.substr(first);
    const std::string stripped = lstripped.substr(0, lstripped.find_last_not_of(kSpace) + 1);
    const size_t at = text.rfind(stripped);
    if (at == std::string::npos)
        throw ChatTemplateError("continue_final_message: the final message does not appear in the rendered chat "
                                "(the template changed its text)");
    const bool as_written = text.compare(at, lstripped.size(), content) == 0;
    text.resize(at + (as_written ? lstripped.size() : stripped.size()));
    return text;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::optional<std::string> bos_token,
                           std::optional<std::string> eos_token, bool strip_bos, const jinja::Limits& limits)
    : template_([&] {
          try {
              return jinja::Template(source, limits);
          } catch (const jinja::Error& e) {
              throw std::runtime_error(std::string("the chat template does not parse: ") + e.what());
          }
      }()),
      bos_(std::move(bos_token)),
      eos_(std::move(eos_token)),
      strip_bos_(strip_bos && bos_ && !bos_->empty()),
      content_parts_(loops_over_content(template_.body())) {
    // A template that fails or loses the arguments when they are an object, but shows them as text, takes text.
    const std::string needle = "tracelm_probe_value";
    const auto renders_needle = [&](const ordered_json& args) {
        ChatInput in;
        in.messages = ordered_json::array(
            {{{"role", "user"}, {"content", "x"}},
             {{"role", "assistant"},
              {"content", ""},
              {"tool_calls", ordered_json::array({{{"id", "abcdefghi"},
                                                   {"type", "function"},
                                                   {"function", {{"name", "probe"}, {"arguments", args}}}}})}},
             {{"role", "tool"}, {"tool_call_id", "abcdefghi"}, {"content", "y"}}});
        const ordered_json parameters = {{"type", "object"}, {"properties", ordered_json::object()}};
        in.tools = ordered_json::array(
            {{{"type", "function"}, {"function", {{"name", "probe"}, {"parameters", parameters}}}}});
        in.now = 0;
        try {
            return apply_as_given(in).find(needle) != std::string::npos;
        } catch (const std::exception&) {
            return false;
        }
    };
    const ordered_json args = {{"p", needle}};
    object_arguments_ = renders_needle(args) || !renders_needle(args.dump());
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tok, const std::string& source) {
    const std::string& text = source.empty() ? tok.chat_template() : source;
    if (text.empty()) throw std::runtime_error("the model has no chat template");
    const auto token = [&](std::optional<int32_t> id) -> std::optional<std::string> {
        if (!id) return std::nullopt;
        return tok.token_text(*id);
    };
    return ChatTemplate(text, token(tok.bos_token_id()), token(tok.eos_token_id()),
                        tok.add_bos_token() && tok.bos_token_id().has_value());
}

std::string ChatTemplate::apply(const ChatInput& input) const {
    std::string text;
    if (!input.arguments_as_json_text || !object_arguments_ || !input.messages.is_array() ||
        !has_tool_calls(input.messages)) {
        text = apply_as_given(input);
    } else {
        ChatInput converted = input;
        converted.messages = object_arguments(input.messages);
        text = apply_as_given(converted);
    }
    return input.continue_final_message ? cut_after_final_message(std::move(text), input.messages) : text;
}

std::string ChatTemplate::apply_as_given(const ChatInput& input) const {
    if (!input.messages.is_array()) throw ChatTemplateError("messages must be a list");
    if (!input.kwargs.is_null() && !input.kwargs.is_object()) throw ChatTemplateError("kwargs must be an object");
    std::string text;
    try {
        std::vector<std::pair<std::string, jinja::Value>> vars;
        if (content_parts_) {
            vars.emplace_back("messages", jinja::from_json(input.messages));
        } else {
            ordered_json messages = ordered_json::array();
            for (const ordered_json& m : input.messages) messages.push_back(m.is_object() ? joined_parts(m) : m);
            vars.emplace_back("messages", jinja::from_json(messages));
        }
        vars.emplace_back("tools", jinja::from_json(input.tools));
        vars.emplace_back("documents", jinja::from_json(input.documents));
        vars.emplace_back("add_generation_prompt", jinja::Value::boolean(input.add_generation_prompt));
        if (bos_) vars.emplace_back("bos_token", jinja::Value::string(*bos_));
        if (eos_) vars.emplace_back("eos_token", jinja::Value::string(*eos_));
        for (const auto& [k, v] : input.kwargs.items()) {
            auto it = vars.begin();
            while (it != vars.end() && it->first != k) ++it;
            if (it == vars.end()) {
                vars.emplace_back(k, jinja::from_json(v));
            } else {
                it->second = jinja::from_json(v);
            }
        }
        text = template_.render(vars, input.now);
    } catch (const jinja::Error& e) {
        throw ChatTemplateError(e.what());
    }
    if (strip_bos_ && text.compare(0, bos_->size(), *bos_) == 0) text.erase(0, bos_->size());
    return text;
}

}  // namespace tracelm
