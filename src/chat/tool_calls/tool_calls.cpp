#include "chat/tool_calls/tool_calls.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "runtime/untrusted.h"

namespace tracelm::tools {

using nlohmann::ordered_json;

namespace {

constexpr std::string_view kWs = " \t\r\n";

// DeepSeek-R1's markers (full-width bars, U+2581 for spaces).
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>",
                           kDsCallBegin = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>",
                           kDsSep = "<｜tool▁sep｜>";

bool is_ws(char c) { return kWs.find(c) != std::string_view::npos; }

std::string_view trim(std::string_view s) {
    const size_t b = s.find_first_not_of(kWs);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(kWs) - b + 1);
}

std::optional<ordered_json> parse_json(std::string_view text) {
    try {
        return untrusted::parse_ordered_json(text);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

using Calls = std::vector<ToolCall>;

// An argument object, given as JSON or as JSON text, as compact JSON text.
std::optional<std::string> arguments_text(const ordered_json* args) {
    if (!args || args->is_null()) return "{}";
    if (args->is_string()) {
        const auto inner = parse_json(args->get<std::string>());
        if (!inner || !inner->is_object()) return std::nullopt;
        return inner->dump();
    }
    if (!args->is_object()) return std::nullopt;
    return args->dump();
}

// {"name": ..., "arguments" | "parameters": {...}} naming an offered function.
bool add_call(const ordered_json& obj, const std::set<std::string>& names, Calls& out) {
    if (!obj.is_object()) return false;
    const auto name = obj.find("name");
    if (name == obj.end() || !name->is_string() || names.count(name->get<std::string>()) == 0) return false;
    auto args = obj.find("arguments");
    if (args == obj.end()) args = obj.find("parameters");
    const auto text = arguments_text(args == obj.end() ? nullptr : &*args);
    if (!text) return false;
    out.push_back({name->get<std::string>(), *text});
    return true;
}

// One call object, or a list of them.
bool add_json_calls(std::string_view text, const std::set<std::string>& names, Calls& out) {
    const auto j = parse_json(trim(text));
    if (!j) return false;
    if (!j->is_array()) return add_call(*j, names, out);
    if (j->empty()) return false;
    for (const ordered_json& c : *j)
        if (!add_call(c, names, out)) return false;
    return true;
}

// The end of the JSON object that starts at `begin` (a '{'), past strings and escapes; npos when it does not end.
size_t object_end(std::string_view s, size_t begin) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = begin; i < s.size(); ++i) {
        const char c = s[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{') {
            ++depth;
        } else if (c == '}' && --depth == 0) {
            return i + 1;
        }
    }
    return std::string_view::npos;
}

// Llama 3.x: JSON objects separated by ';' or whitespace, nothing else.
bool llama_calls(std::string_view body, const std::set<std::string>& names, Calls& out) {
    size_t i = 0;
    while (true) {
        while (i < body.size() && (is_ws(body[i]) || body[i] == ';')) ++i;
        if (i == body.size()) return !out.empty();
        if (body[i] != '{') return false;
        const size_t end = object_end(body, i);
        if (end == std::string_view::npos) return false;
        const auto j = parse_json(body.substr(i, end - i));
        if (!j || !add_call(*j, names, out)) return false;
        i = end;
    }
}

// Mistral: after each [TOOL_CALLS], a JSON list of calls (up to v7) or name[CALL_ID]id[ARGS]{...} (v11+).
bool mistral_calls(std::string_view body, const std::set<std::string>& names, Calls& out) {
    constexpr std::string_view kCalls = "[TOOL_CALLS]", kArgs = "[ARGS]", kCallId = "[CALL_ID]";
    size_t start = 0;
    while (start <= body.size()) {
        size_t next = body.find(kCalls, start);
        const std::string_view seg = trim(body.substr(start, next == std::string_view::npos ? next : next - start));
        if (!seg.empty() && seg.front() == '[') {
            if (!add_json_calls(seg, names, out)) return false;
        } else {
            const size_t args = seg.find(kArgs);
            if (args == std::string_view::npos) return false;
            std::string_view name = seg.substr(0, args);
            name = trim(name.substr(0, name.find(kCallId)));
            const auto j = parse_json(seg.substr(args + kArgs.size()));
            if (!j || !j->is_object() || names.count(std::string(name)) == 0) return false;
            out.push_back({std::string(name), j->dump()});
        }
        if (next == std::string_view::npos) break;
        start = next + kCalls.size();
    }
    return !out.empty();
}

// DeepSeek-R1: <｜tool▁call▁begin｜>TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>, repeated.
bool deepseek_calls(std::string_view body, const std::set<std::string>& names, Calls& out) {
    size_t i = 0;
    while (true) {
        while (i < body.size() && is_ws(body[i])) ++i;
        if (i == body.size()) return !out.empty();
        if (body.compare(i, kDsCallBegin.size(), kDsCallBegin) != 0) return false;
        const size_t end = body.find(kDsCallEnd, i);
        if (end == std::string_view::npos) return false;
        const std::string_view call = body.substr(i + kDsCallBegin.size(), end - i - kDsCallBegin.size());
        i = end + kDsCallEnd.size();
        const size_t sep = call.find(kDsSep);
        if (sep == std::string_view::npos) return false;
        const std::string_view rest = call.substr(sep + kDsSep.size());
        const size_t nl = rest.find('\n');
        if (nl == std::string_view::npos) return false;
        const std::string name(trim(rest.substr(0, nl)));
        std::string_view args = trim(rest.substr(nl + 1));
        if (args.substr(0, 7) == "```json") args = args.substr(7);
        else if (args.substr(0, 3) == "```") args = args.substr(3);
        if (args.size() >= 3 && args.substr(args.size() - 3) == "```") args = args.substr(0, args.size() - 3);
        const auto j = parse_json(trim(args));
        if (!j || !j->is_object() || names.count(name) == 0) return false;
        out.push_back({name, j->dump()});
    }
}

// The calls of one block's body (between its markers); nullopt when it is not a well-formed call of this format.
std::optional<Calls> parse_body(ToolCallFormat f, std::string_view body, const std::set<std::string>& names) {
    Calls calls;
    bool ok = false;
    switch (f) {
        case ToolCallFormat::Hermes: {
            const auto j = parse_json(trim(body));
            ok = j && add_call(*j, names, calls);
            break;
        }
        case ToolCallFormat::Llama3Json:
            ok = llama_calls(body, names, calls);
            break;
        case ToolCallFormat::Mistral:
        case ToolCallFormat::MistralArgs:
            ok = mistral_calls(body, names, calls);
            break;
        case ToolCallFormat::DeepSeekR1:
            ok = deepseek_calls(body, names, calls);
            break;
        case ToolCallFormat::Granite:
            ok = add_json_calls(body, names, calls);
            break;
        case ToolCallFormat::Harmony:  // HarmonyParser's
        case ToolCallFormat::None:
            break;
    }
    if (!ok) return std::nullopt;
    return calls;
}

// Each format's name, the marker that opens a call block, the one that closes it (empty: the end of the output),
// and the markers tokenizers may hold as special tokens.
struct Syntax {
    const char* name;
    std::string_view open, close;
    std::vector<std::string_view> markers;
};

const Syntax& syntax(ToolCallFormat f) {
    static const Syntax kNone{"none", {}, {}, {}};
    static const Syntax kFormats[] = {  // in ToolCallFormat's order, after None
        {"hermes", "<tool_call>", "</tool_call>", {"<tool_call>", "</tool_call>"}},
        {"llama3_json", "<|python_tag|>", {}, {"<|python_tag|>"}},
        {"mistral", "[TOOL_CALLS]", {}, {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"}},
        {"mistral_args", "[TOOL_CALLS]", {}, {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"}},
        {"deepseek_r1", kDsCallsBegin, kDsCallsEnd, {kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsCallEnd, kDsSep}},
        {"granite", "<|tool_call|>", {}, {"<|tool_call|>"}},
        {"harmony", {}, {}, {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|return|>",
                             "<|call|>"}},
    };
    return f == ToolCallFormat::None ? kNone : kFormats[static_cast<size_t>(f) - 1];
}

}  // namespace

const char* format_name(ToolCallFormat f) { return syntax(f).name; }

ToolCallFormat detect_format(std::string_view src) {
    const auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
    if (has(kDsCallsBegin)) return ToolCallFormat::DeepSeekR1;
    if (has("[TOOL_CALLS]")) return has("[ARGS]") ? ToolCallFormat::MistralArgs : ToolCallFormat::Mistral;
    if (has("<tool_call>")) return ToolCallFormat::Hermes;
    if (has("<|tool_call|>")) return ToolCallFormat::Granite;
    if (has("<|python_tag|>") || has("ipython<|end_header_id|>")) return ToolCallFormat::Llama3Json;
    if (has("<|channel|>") && has("<|call|>")) return ToolCallFormat::Harmony;
    return ToolCallFormat::None;
}

std::vector<std::string> marker_tokens(ToolCallFormat f) {
    const auto& m = syntax(f).markers;
    return {m.begin(), m.end()};
}

std::string new_call_id(ToolCallFormat f, std::mt19937_64& rng) {
    static constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const bool mistral = f == ToolCallFormat::Mistral || f == ToolCallFormat::MistralArgs;
    std::string id = mistral ? "" : "call_";
    for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng() % kAlnum.size()];
    return id;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, std::set<std::string> names, size_t max_calls)
    : format_(format),
      names_(std::move(names)),
      max_calls_(max_calls),
      open_(syntax(format).open),
      close_(syntax(format).close) {
    if (format == ToolCallFormat::Harmony) harmony_.emplace(names_, max_calls_);
}

std::vector<ToolEvent> ToolCallParser::push(std::string_view text) {
    std::vector<ToolEvent> out;
    if (harmony_) {
        harmony_->push(text, out);
        return out;
    }
    pending_ += text;
    scan(out, false);
    return out;
}

std::vector<ToolEvent> ToolCallParser::finish() {
    std::vector<ToolEvent> out;
    if (harmony_)
        harmony_->finish(out);
    else
        scan(out, true);
    return out;
}

void ToolCallParser::scan(std::vector<ToolEvent>& out, bool at_end) {
    while (in_block_ ? scan_block(out, at_end) : scan_content(out, at_end)) {
    }
}

// Content state. Invariant: pending_[0, scanned_) is whitespace held back (it goes out only once text follows).
bool ToolCallParser::scan_content(std::vector<ToolEvent>& out, bool at_end) {
    // Llama 3.x writes a call as the answer's first text, a bare JSON object.
    if (format_ == ToolCallFormat::Llama3Json && !seen_text_ && calls_ == 0) {
        const size_t first = pending_.find_first_not_of(kWs, scanned_);
        if (first != std::string::npos && pending_[first] == '{') {
            ws_before_ = pending_.substr(0, first);
            block_open_.clear();
            pending_.erase(0, first);
            scanned_ = 0;
            in_block_ = true;
            return true;
        }
    }
    const size_t at = open_.empty() ? std::string::npos : pending_.find(open_, scanned_);
    if (at != std::string::npos) {
        const std::string_view before(pending_.data(), at);
        const size_t keep = before.find_last_not_of(kWs) + 1;  // npos + 1 == 0: all whitespace
        emit_content(before.substr(0, keep), out);
        ws_before_ = std::string(before.substr(keep));
        block_open_ = open_;
        pending_.erase(0, at + open_.size());
        scanned_ = 0;
        in_block_ = true;
        return true;
    }
    // Hold back a tail that could begin a marker, and the whitespace before it.
    size_t hold = 0;
    if (!at_end && !open_.empty()) {
        for (size_t k = std::min(open_.size() - 1, pending_.size()); k > 0; --k)
            if (pending_.compare(pending_.size() - k, k, open_, 0, k) == 0) {
                hold = k;
                break;
            }
    }
    size_t release = pending_.size() - hold;
    if (!at_end) {
        // Only the part past scanned_ can hold text; before it is whitespace.
        size_t i = release;
        while (i > scanned_ && is_ws(pending_[i - 1])) --i;
        release = i > scanned_ ? i : 0;
    }
    emit_content(std::string_view(pending_).substr(0, release), out);
    pending_.erase(0, release);
    scanned_ = pending_.size() - hold;
    return false;
}

bool ToolCallParser::scan_block(std::vector<ToolEvent>& out, bool at_end) {
    if (!close_.empty()) {
        const size_t at = pending_.find(close_, scanned_);
        if (at != std::string::npos) {
            const std::string rest = pending_.substr(at + close_.size());
            close_block(std::string_view(pending_).substr(0, at), close_, out);
            pending_ = rest;
            scanned_ = 0;
            in_block_ = false;
            return true;
        }
        scanned_ = pending_.size() >= close_.size() ? pending_.size() - close_.size() + 1 : 0;
    }
    if (at_end) {
        close_block(pending_, "", out);
        pending_.clear();
        scanned_ = 0;
        in_block_ = false;
    }
    return false;
}

void ToolCallParser::close_block(std::string_view body, std::string_view close, std::vector<ToolEvent>& out) {
    if (auto calls = parse_body(format_, body, names_)) {
        for (ToolCall& c : *calls)
            if (calls_ < max_calls_) {
                out.emplace_back(std::move(c));
                ++calls_;
            }
        ws_before_.clear();
        after_block_ = true;
        return;
    }
    std::string raw = std::move(ws_before_);
    raw += block_open_;
    raw += body;
    raw += close;
    ws_before_.clear();
    emit_content(raw, out);
}

void ToolCallParser::emit_content(std::string_view text, std::vector<ToolEvent>& out) {
    if (after_block_) {
        const size_t b = text.find_first_not_of(kWs);
        if (b == std::string_view::npos) return;
        text.remove_prefix(b);
        after_block_ = false;
    }
    if (text.empty()) return;
    if (text.find_first_not_of(kWs) != std::string_view::npos) seen_text_ = true;
    if (!out.empty() && std::holds_alternative<std::string>(out.back()))
        std::get<std::string>(out.back()) += text;
    else
        out.emplace_back(std::string(text));
}

ParsedOutput parse_output(ToolCallFormat format, std::string_view text, const std::set<std::string>& names,
                          size_t max_calls) {
    ToolCallParser p(format, names, max_calls);
    std::vector<ToolEvent> events = p.push(text);
    for (ToolEvent& e : p.finish()) events.push_back(std::move(e));
    ParsedOutput r;
    for (ToolEvent& e : events) {
        if (auto* s = std::get_if<std::string>(&e))
            r.content += *s;
        else
            r.calls.push_back(std::move(std::get<ToolCall>(e)));
    }
    return r;
}

std::vector<ForcedCallForm> forced_call_forms(ToolCallFormat format, const ordered_json& tools,
                                              const std::string& name) {
    std::vector<ForcedCallForm> forms;
    if (!tools.is_array()) return forms;
    for (const ordered_json& t : tools) {
        const ordered_json& fn = t.at("function");
        const std::string n = fn.at("name").get<std::string>();
        if (!name.empty() && n != name) continue;
        ForcedCallForm f;
        f.name = n;
        f.schema = fn.contains("parameters") ? fn["parameters"] : ordered_json{{"type", "object"}};
        const std::string quoted = ordered_json(n).dump();
        switch (format) {
            case ToolCallFormat::Hermes:
                f.prefix = "<tool_call>\n{\"name\": " + quoted + ", \"arguments\": ";
                f.suffix = "}\n</tool_call>";
                break;
            case ToolCallFormat::Llama3Json:
                f.prefix = "{\"name\": " + quoted + ", \"parameters\": ";
                f.suffix = "}";
                break;
            case ToolCallFormat::Mistral:
                f.prefix = "[TOOL_CALLS][{\"name\": " + quoted + ", \"arguments\": ";
                f.suffix = "}]";
                break;
            case ToolCallFormat::MistralArgs:
                f.prefix = "[TOOL_CALLS]" + n + "[ARGS]";
                break;
            case ToolCallFormat::DeepSeekR1:
                f.prefix = std::string(kDsCallsBegin) + std::string(kDsCallBegin) + "function" +
                           std::string(kDsSep) + n + "\n```json\n";
                f.suffix = "\n```" + std::string(kDsCallEnd) + std::string(kDsCallsEnd);
                break;
            case ToolCallFormat::Granite:
                f.prefix = "<|tool_call|>[{\"name\": " + quoted + ", \"arguments\": ";
                f.suffix = "}]";
                break;
            case ToolCallFormat::Harmony:  // as OpenAI's harmony guide shows a call, after the generation prompt
                f.prefix = "<|channel|>commentary to=functions." + n + " <|constrain|>json<|message|>";
                f.suffix = "<|call|>";
                break;
            case ToolCallFormat::None:
                return {};
        }
        forms.push_back(std::move(f));
    }
    return forms;
}

std::optional<std::string> call_separator(ToolCallFormat format) {
    switch (format) {
        case ToolCallFormat::Hermes:
            return "\n";
        case ToolCallFormat::Llama3Json:
            return "; ";
        case ToolCallFormat::Mistral:
        case ToolCallFormat::MistralArgs:
            return "";
        case ToolCallFormat::DeepSeekR1:
        case ToolCallFormat::Granite:
        case ToolCallFormat::Harmony:  // <|call|> ends generation: one call per answer
        case ToolCallFormat::None:
            break;
    }
    return std::nullopt;
}

}  // namespace tracelm::tools
