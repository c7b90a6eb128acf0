// UTF-8 and Unicode helpers shared by the tokenizer: validation with the Unicode "maximal subpart"
// replacement rule (the one Rust's from_utf8_lossy and Python's errors="replace" use), so that
// decode() and StreamDecoder agree byte for byte, plus normalization forms via utf8proc.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tracelm::tokenizer_detail {

enum class Utf8Kind {
    Valid,       // a complete, well-formed character
    Invalid,     // a maximal subpart that can never become well-formed: one U+FFFD
    Incomplete,  // a well-formed prefix cut off by the end of the input
};

struct Utf8Unit {
    Utf8Kind kind;
    size_t len;          // bytes covered, always >= 1
    char32_t codepoint;  // only meaningful for Valid
};

// Classifies the unit starting at s[pos] (pos < s.size()).
Utf8Unit scan_utf8(std::string_view s, size_t pos);

bool is_valid_utf8(std::string_view s);

// Appends `in` to `out` as valid UTF-8, each invalid maximal subpart replaced by U+FFFD. With
// final = false an Incomplete tail is left alone (more bytes may complete it); returns the number
// of bytes of `in` consumed.
size_t append_utf8_lossy(std::string_view in, std::string& out, bool final);
std::string to_valid_utf8(std::string_view in);

void append_utf8(char32_t codepoint, std::string& out);

enum class NormalForm { NFC, NFD, NFKC, NFKD };

// `text` must be valid UTF-8.
std::string unicode_normalize(std::string_view text, NormalForm form);

// Unicode White_Space, and the "word character" class (letters, marks, decimal digits, letter
// numbers, connector punctuation) that added tokens' lstrip/rstrip/single_word flags refer to.
bool is_unicode_whitespace(char32_t c);
bool is_word_char(char32_t c);

}  // namespace tracelm::tokenizer_detail
