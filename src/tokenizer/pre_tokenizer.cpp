#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

#include "tokenizer/utf8.h"

namespace tracelm::tokenizer_detail {

namespace {

// The pattern of the GPT-2 ByteLevel pre-tokenizer (use_regex = true); tokenizer.json does not
// spell it out.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int code) {
    PCRE2_UCHAR buffer[256];
    if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) {
        return "PCRE2 error " + std::to_string(code);
    }
    return reinterpret_cast<const char*>(buffer);
}

struct MatchDataDeleter {
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

// Unicode White_Space as class items (valid inside [...]).
constexpr std::string_view kWhiteSpaceItems =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

}  // namespace

std::string oniguruma_compatible_pattern(std::string_view pattern) {
    std::string out;
    bool in_class = false;
    size_t i = 0;
    const size_t n = pattern.size();
    while (i < n) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < n) {
            const char escaped = pattern[i + 1];
            size_t length = 2;
            if (escaped == 'Q') {  // \Q...\E quotes everything up to \E
                const size_t end = pattern.find("\\E", i + 2);
                length = end == std::string_view::npos ? n - i : end + 2 - i;
            } else if (escaped == 's') {
                out += in_class ? std::string(kWhiteSpaceItems)
                                : "[" + std::string(kWhiteSpaceItems) + "]";
                i += 2;
                continue;
            } else if (escaped == 'S' && !in_class) {
                out += "[^" + std::string(kWhiteSpaceItems) + "]";
                i += 2;
                continue;
            } else if (escaped == 'c' && i + 2 < n) {
                length = 3;  // \cX: X is the control letter, even when it is '[' or ']'
            }
            out.append(pattern.substr(i, length));
            i += length;
            continue;
        }
        if (!in_class && c == '[') {
            // A ']' right after '[' or '[^' is a literal member, not the end of the class.
            in_class = true;
            out += c;
            ++i;
            if (i < n && pattern[i] == '^') out += pattern[i++];
            if (i < n && pattern[i] == ']') out += pattern[i++];
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && pattern[i + 1] == ':') {
            if (const size_t end = pattern.find(":]", i + 2); end != std::string_view::npos) {
                out.append(pattern.substr(i, end + 2 - i));  // POSIX class such as [:alpha:]
                i = end + 2;
                continue;
            }
        }
        if (in_class && c == ']') in_class = false;
        out += c;
        ++i;
    }
    return out;
}

struct Regex::Impl {
    pcre2_code* code = nullptr;
    ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, bool literal) : impl_(std::make_unique<Impl>()) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // PCRE2 rejects UCP together with LITERAL, and a literal has no classes for it to affect.
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                options, &error, &error_offset, nullptr);
    if (impl_->code == nullptr) {
        throw std::runtime_error("cannot compile pre-tokenizer regex at offset " +
                                 std::to_string(error_offset) + ": " + pcre2_message(error));
    }
    // JIT is only a speed-up; without it (unsupported platform) matching uses the interpreter.
    pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
    const std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
        pcre2_match_data_create_from_pattern(impl_->code, nullptr));
    if (!match) throw std::bad_alloc();
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());

    std::vector<std::pair<size_t, size_t>> matches;
    size_t offset = 0;
    while (offset < text.size()) {
        // The caller guarantees valid UTF-8; re-checking it on every call would make the scan
        // quadratic in the text length.
        uint32_t options = PCRE2_NO_UTF_CHECK;
        int rc =
            pcre2_match(impl_->code, subject, text.size(), offset, options, match.get(), nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            options |= PCRE2_NO_JIT;
            rc = pcre2_match(impl_->code, subject, text.size(), offset, options, match.get(),
                             nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            throw std::runtime_error("tokenizer: pre-tokenizer regex failed: " + pcre2_message(rc));
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const size_t begin = ovector[0];
        const size_t end = ovector[1];
        if (begin == end) {
            // Step over one whole character so the next search starts on a boundary.
            if (end >= text.size()) break;
            offset = end + scan_utf8(text, end).len;
            continue;
        }
        matches.emplace_back(begin, end);
        offset = end;
    }
    return matches;
}

void PreTokenizer::add_split(std::string_view pattern, bool literal, SplitBehavior behavior,
                             bool invert) {
    const std::string translated =
        literal ? std::string(pattern) : oniguruma_compatible_pattern(pattern);
    steps_.emplace_back(SplitStep{Regex(translated, literal), behavior, invert});
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
    if (add_prefix_space) steps_.emplace_back(PrefixSpaceStep{});
    if (use_regex) add_split(kGpt2Pattern, false, SplitBehavior::Isolated, false);
}

void PreTokenizer::apply(const SplitStep& step, std::string_view piece,
                         std::vector<std::string>& out) {
    // The piece as alternating runs: (begin, end, is_match), covering it completely.
    struct Run {
        size_t begin, end;
        bool is_match;
    };
    std::vector<Run> runs;
    size_t previous = 0;
    for (const auto& [begin, end] : step.regex.find_all(piece)) {
        if (previous != begin) runs.push_back({previous, begin, step.invert});
        runs.push_back({begin, end, !step.invert});
        previous = end;
    }
    if (previous != piece.size()) runs.push_back({previous, piece.size(), step.invert});

    // Folds the runs into output ranges following the reference implementation's rules.
    std::vector<std::pair<size_t, size_t>> ranges;
    bool previous_match = false;
    switch (step.behavior) {
        case SplitBehavior::Removed:
            for (const Run& r : runs) {
                if (!r.is_match) ranges.emplace_back(r.begin, r.end);
            }
            break;
        case SplitBehavior::Isolated:
            for (const Run& r : runs) ranges.emplace_back(r.begin, r.end);
            break;
        case SplitBehavior::MergedWithPrevious:
            for (const Run& r : runs) {
                if (r.is_match && !previous_match && !ranges.empty()) {
                    ranges.back().second = r.end;
                } else {
                    ranges.emplace_back(r.begin, r.end);
                }
                previous_match = r.is_match;
            }
            break;
        case SplitBehavior::MergedWithNext:
            for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
                if (it->is_match && !previous_match && !ranges.empty()) {
                    ranges.back().first = it->begin;
                } else {
                    ranges.emplace_back(it->begin, it->end);
                }
                previous_match = it->is_match;
            }
            std::reverse(ranges.begin(), ranges.end());
            break;
        case SplitBehavior::Contiguous:
            for (const Run& r : runs) {
                if (r.is_match == previous_match && !ranges.empty()) {
                    ranges.back().second = r.end;
                } else {
                    ranges.emplace_back(r.begin, r.end);
                }
                previous_match = r.is_match;
            }
            break;
    }
    for (const auto& [begin, end] : ranges) out.emplace_back(piece.substr(begin, end - begin));
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
    std::vector<std::string> pieces;
    if (!text.empty()) pieces.emplace_back(text);
    std::vector<std::string> next;
    for (const Step& step : steps_) {
        next.clear();
        for (const std::string& piece : pieces) {
            if (const auto* split = std::get_if<SplitStep>(&step)) {
                apply(*split, piece, next);
            } else if (piece.front() == ' ') {
                next.push_back(piece);
            } else {
                next.push_back(" " + piece);
            }
        }
        pieces.swap(next);
    }
    return pieces;
}

}  // namespace tracelm::tokenizer_detail
