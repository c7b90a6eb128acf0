#include "serve/forced_tool_call.h"

#include <string_view>
#include <utility>
#include <vector>

namespace tracelm::serve {

namespace {

using nlohmann::ordered_json;

struct SpecialMarker {
    std::string text;
    int32_t id;
};

// The format's markers that are special tokens here: grammar text never matches a special token (grammar.h), so
// these must be asked for as the token itself.
std::vector<SpecialMarker> special_markers(const Tokenizer& tok, tools::ToolCallFormat format) {
    std::vector<SpecialMarker> out;
    for (const std::string& m : tools::marker_tokens(format))
        if (const auto id = tok.token_id(m); id && tok.is_special(*id)) out.push_back({m, *id});
    return out;
}

// Literal text as structural-tag elements: byte strings, and each special marker in it as its token.
void append_literal(std::string_view text, const std::vector<SpecialMarker>& specials, ordered_json& elements) {
    while (!text.empty()) {
        size_t at = std::string_view::npos;
        const SpecialMarker* hit = nullptr;
        for (const SpecialMarker& s : specials) {
            if (const size_t p = text.find(s.text); p < at) {
                at = p;
                hit = &s;
            }
        }
        const std::string_view plain = text.substr(0, at);
        if (!plain.empty()) elements.push_back({{"type", "const_string"}, {"value", std::string(plain)}});
        if (!hit) return;
        elements.push_back({{"type", "token"}, {"token", hit->id}});
        text.remove_prefix(at + hit->text.size());
    }
}

ordered_json sequence(ordered_json elements) {
    return elements.size() == 1 ? std::move(elements[0])
                                : ordered_json{{"type", "sequence"}, {"elements", std::move(elements)}};
}

}  // namespace

grammar::Spec forced_call_constraint(const Tokenizer& tokenizer, tools::ToolCallFormat format,
                                     const ordered_json& tools, const std::string& name, bool parallel) {
    const std::vector<SpecialMarker> specials = special_markers(tokenizer, format);
    ordered_json calls = ordered_json::array();
    for (const tools::ForcedCallForm& f : tools::forced_call_forms(format, tools, name)) {
        const std::string schema = f.schema.dump();
        try {
            grammar::check_json_schema(schema);
        } catch (const grammar::GrammarError& e) {
            throw grammar::GrammarError("the parameters of '" + f.name + "': " + e.what());
        }
        ordered_json elements = ordered_json::array();
        append_literal(f.prefix, specials, elements);
        // At most one whitespace character in a row: a small model left free whitespace may write it forever.
        elements.push_back({{"type", "json_schema"}, {"json_schema", f.schema}, {"max_whitespace_cnt", 1}});
        append_literal(f.suffix, specials, elements);
        calls.push_back(sequence(std::move(elements)));
    }
    if (calls.empty()) throw grammar::GrammarError("the model's chat template shows no tool-call format");
    ordered_json one = calls.size() == 1 ? std::move(calls[0]) : ordered_json{{"type", "or"}, {"elements", calls}};
    ordered_json format_json = one;
    if (const auto sep = tools::call_separator(format); parallel && sep) {
        ordered_json more = ordered_json::array();
        append_literal(*sep, specials, more);
        more.push_back(one);
        format_json = sequence(ordered_json::array({one, {{"type", "star"}, {"content", sequence(std::move(more))}}}));
    }
    return grammar::Spec{grammar::Kind::StructuralTag,
                         ordered_json{{"type", "structural_tag"}, {"format", std::move(format_json)}}.dump()};
}

}  // namespace tracelm::serve
