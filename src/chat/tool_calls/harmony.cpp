#include "chat/tool_calls/harmony.h"

#include <algorithm>
#include <array>
#include <utility>

#include "runtime/untrusted.h"

namespace tracelm::tools {

namespace {

constexpr std::string_view kMessage = "<|message|>", kChannel = "<|channel|>", kMarkerStart = "<|";
constexpr std::array<std::string_view, 3> kCloses = {"<|end|>", "<|return|>", "<|call|>"};
constexpr std::string_view kFunctions = "functions.";

// The word after `key` in `header` (up to whitespace or a marker); empty when `key` is absent.
std::string_view word_after(std::string_view header, std::string_view key) {
    const size_t at = header.find(key);
    if (at == std::string_view::npos) return {};
    const std::string_view rest = header.substr(at + key.size());
    return rest.substr(0, rest.find_first_of(" \t\r\n<"));
}

// The length of the longest tail of `s` that begins one of the closing markers without completing it.
size_t partial_close(std::string_view s) {
    for (size_t k = std::min<size_t>(s.size(), 9); k > 0; --k)
        for (const std::string_view m : kCloses)
            if (k < m.size() && s.substr(s.size() - k) == m.substr(0, k)) return k;
    return 0;
}

}  // namespace

HarmonyParser::HarmonyParser(std::set<std::string> names, size_t max_calls)
    : names_(std::move(names)), max_calls_(max_calls) {}

void HarmonyParser::push(std::string_view text, std::vector<ToolEvent>& out) {
    pending_ += text;
    while (in_body_ ? scan_body(out, false) : scan_header(out, false)) {
    }
}

void HarmonyParser::finish(std::vector<ToolEvent>& out) {
    while (in_body_ ? scan_body(out, true) : scan_header(out, true)) {
    }
}

void HarmonyParser::open_message(std::string_view header) {
    header_ = std::string(header);
    recipient_ = std::string(word_after(header, "to="));
    const std::string_view channel = word_after(header, kChannel);
    if (!recipient_.empty())
        kind_ = Kind::Call;
    else if (channel.empty() || channel == "final" || channel == "commentary")
        kind_ = Kind::Content;
    else
        kind_ = Kind::Hidden;
}

// Between messages: text before a header is content (a model that writes no harmony), except whitespace next to a
// header; a header runs from "<|" to <|message|>.
bool HarmonyParser::scan_header(std::vector<ToolEvent>& out, bool at_end) {
    const size_t marker = pending_.find(kMarkerStart);
    size_t plain = marker == std::string::npos ? pending_.size() : marker;
    if (marker == std::string::npos && !at_end && !pending_.empty() && pending_.back() == '<') --plain;
    if (plain > 0) {
        const bool blank = pending_.find_first_not_of(" \t\r\n") >= plain;
        if (blank && marker == std::string::npos && !at_end) return false;  // held until a header or text follows
        if (!blank) out.emplace_back(pending_.substr(0, plain));
        pending_.erase(0, plain);
        scanned_ = 0;
        return true;
    }
    const size_t at = pending_.find(kMessage, scanned_);
    if (at == std::string::npos) {
        if (at_end) {
            pending_.clear();  // a header without a message: nothing to show
            scanned_ = 0;
        } else {
            scanned_ = pending_.size() >= kMessage.size() ? pending_.size() - kMessage.size() + 1 : 0;
        }
        return false;
    }
    open_message(std::string_view(pending_).substr(0, at));
    pending_.erase(0, at + kMessage.size());
    scanned_ = 0;
    in_body_ = true;
    return true;
}

bool HarmonyParser::scan_body(std::vector<ToolEvent>& out, bool at_end) {
    size_t at = std::string::npos;
    std::string_view close;
    for (const std::string_view c : kCloses) {
        const size_t i = pending_.find(c, scanned_);
        if (i < at) {
            at = i;
            close = c;
        }
    }
    if (at != std::string::npos || at_end) {
        const size_t end = at == std::string::npos ? pending_.size() : at;
        const std::string rest = at == std::string::npos ? "" : pending_.substr(at + close.size());
        close_message(std::string_view(pending_).substr(0, end), close, out);
        pending_ = rest;
        scanned_ = 0;
        in_body_ = false;
        return true;
    }
    const size_t hold = partial_close(pending_);
    if (kind_ == Kind::Call) {  // held whole until it closes
        scanned_ = pending_.size() - hold;
        return false;
    }
    if (kind_ == Kind::Content && pending_.size() > hold) out.emplace_back(pending_.substr(0, pending_.size() - hold));
    pending_.erase(0, pending_.size() - hold);
    scanned_ = 0;
    return false;
}

void HarmonyParser::close_message(std::string_view body, std::string_view close, std::vector<ToolEvent>& out) {
    if (kind_ == Kind::Content && !body.empty()) out.emplace_back(std::string(body));
    if (kind_ != Kind::Call) return;
    const std::string name =
        recipient_.rfind(kFunctions, 0) == 0 ? recipient_.substr(kFunctions.size()) : std::string();
    if (names_.count(name) != 0) {
        try {
            const auto args = untrusted::parse_ordered_json(body);
            if (args.is_object()) {
                if (calls_ < max_calls_) {
                    out.emplace_back(ToolCall{name, args.dump()});
                    ++calls_;
                }
                return;
            }
        } catch (const std::exception&) {
        }
    }
    // Not a call of an offered function: the message as written.
    out.emplace_back(header_ + std::string(kMessage) + std::string(body) + std::string(close));
}

}  // namespace tracelm::tools
