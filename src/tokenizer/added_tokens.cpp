#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace tracelm::tokenizer_detail {

namespace {

// Offset where the character ending at `end` (> 0) begins, in valid UTF-8.
size_t previous_char_start(std::string_view text, size_t end) {
    size_t pos = end - 1;
    while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
    return pos;
}

char32_t char_at(std::string_view text, size_t pos) { return scan_utf8(text, pos).codepoint; }

bool ends_with_word_char(std::string_view text, size_t end) {
    return end > 0 && is_word_char(char_at(text, previous_char_start(text, end)));
}

bool starts_with_word_char(std::string_view text, size_t begin) {
    return begin < text.size() && is_word_char(char_at(text, begin));
}

// Start of the whitespace run that ends at `end`.
size_t whitespace_run_start(std::string_view text, size_t end) {
    while (end > 0) {
        const size_t start = previous_char_start(text, end);
        if (!is_unicode_whitespace(char_at(text, start))) break;
        end = start;
    }
    return end;
}

// End of the whitespace run that starts at `begin`.
size_t whitespace_run_end(std::string_view text, size_t begin) {
    while (begin < text.size()) {
        const Utf8Unit u = scan_utf8(text, begin);
        if (!is_unicode_whitespace(u.codepoint)) break;
        begin += u.len;
    }
    return begin;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
    nodes_.emplace_back();
    for (const AddedToken& token : tokens) {
        if (token.content.empty()) continue;
        size_t node = 0;
        for (unsigned char b : token.content) {
            auto& children = nodes_[node].children;
            const auto it = std::find_if(children.begin(), children.end(),
                                         [b](const auto& child) { return child.first == b; });
            if (it != children.end()) {
                node = static_cast<size_t>(it->second);
            } else {
                const auto child = static_cast<int32_t>(nodes_.size());
                children.emplace_back(b, child);
                nodes_.emplace_back();  // invalidates `children`; not used again
                node = static_cast<size_t>(child);
            }
        }
        // With duplicated contents the first declaration wins.
        if (nodes_[node].token < 0) {
            nodes_[node].token = static_cast<int32_t>(tokens_.size());
            tokens_.push_back(token);
            starts_[static_cast<unsigned char>(token.content.front())] = true;
        }
    }
}

std::pair<int32_t, size_t> AddedTokenMatcher::longest_match(std::string_view text, size_t pos,
                                                            bool include_special) const {
    std::pair<int32_t, size_t> best{-1, 0};
    size_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
        const auto& children = nodes_[node].children;
        const auto b = static_cast<unsigned char>(text[i]);
        const auto it = std::find_if(children.begin(), children.end(),
                                     [b](const auto& child) { return child.first == b; });
        if (it == children.end()) break;
        node = static_cast<size_t>(it->second);
        const int32_t token = nodes_[node].token;
        if (token >= 0 && (include_special || !tokens_[static_cast<size_t>(token)].special)) {
            best = {token, i + 1 - pos};
        }
    }
    return best;
}

std::vector<AddedTokenMatcher::Segment> AddedTokenMatcher::split(std::string_view text,
                                                                 bool include_special) const {
    std::vector<Segment> segments;
    size_t consumed = 0;  // end of the last emitted segment
    size_t pos = 0;
    while (pos < text.size()) {
        if (!starts_[static_cast<unsigned char>(text[pos])]) {
            ++pos;
            continue;
        }
        const auto [index, length] = longest_match(text, pos, include_special);
        if (index < 0) {
            ++pos;
            continue;
        }
        const AddedToken& token = tokens_[static_cast<size_t>(index)];
        const size_t match_end = pos + length;
        size_t begin = pos;
        pos = match_end;
        if (token.single_word &&
            (ends_with_word_char(text, begin) || starts_with_word_char(text, match_end))) {
            continue;
        }
        // Matches are found independently of the stripping, as in the reference; clamping keeps
        // segments from overlapping when an rstrip already consumed the start of this match.
        begin = std::max(begin, consumed);
        if (token.lstrip) begin = std::max(whitespace_run_start(text, begin), consumed);
        size_t end = std::max(match_end, begin);
        if (token.rstrip) end = whitespace_run_end(text, end);

        if (consumed < begin) segments.push_back({text.substr(consumed, begin - consumed), -1});
        segments.push_back({text.substr(begin, end - begin), token.id});
        consumed = end;
    }
    if (consumed < text.size()) segments.push_back({text.substr(consumed), -1});
    return segments;
}

}  // namespace tracelm::tokenizer_detail
