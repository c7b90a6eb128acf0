// Python's str semantics over UTF-8 text: code point counts and offsets, str.isspace / isprintable and the
// case mappings. Templates index, slice and measure strings in code points, as Python does; bytes that are not
// valid UTF-8 count as one code point each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tracelm::jinja::py {

// The code point starting at s[i] (U+FFFD-like: the byte itself when it starts no valid sequence), and its
// length in bytes.
char32_t decode(std::string_view s, size_t i, size_t* len);
void append_utf8(std::string& out, char32_t cp);

size_t length(std::string_view s);                 // code points
std::vector<size_t> offsets(std::string_view s);   // byte offset of each code point, then s.size()
bool is_ascii(std::string_view s);

bool is_space(char32_t cp);      // str.isspace
bool is_printable(char32_t cp);  // str.isprintable (what repr() keeps unescaped)
bool is_alnum(char32_t cp);      // str.isalnum
bool is_alpha(char32_t cp);
bool is_digit(char32_t cp);      // str.isdigit
bool is_upper(char32_t cp);
bool is_lower(char32_t cp);
// str.isupper / str.islower: some cased character, and every cased one of that case.
bool str_isupper(std::string_view s);
bool str_islower(std::string_view s);

// str.upper, lower, title, capitalize, swapcase (single code point mappings; Python's few multi-character
// special casings, such as German sharp s to "SS", map to one code point here).
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);

// str.strip / lstrip / rstrip: `chars` null strips whitespace, else any code point of *chars.
std::string_view strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split / rsplit: sep null splits on runs of whitespace (empty parts dropped); maxsplit < 0: no limit.
std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right);
// str.splitlines
std::vector<std::string> splitlines(std::string_view s, bool keepends);

// markupsafe's escape: & < > " ' as HTML entities.
std::string html_escape(std::string_view s);
// Python's repr() of a string: quoted, backslash escapes for quotes, controls and non-printable characters.
std::string repr(std::string_view s);
// Python's repr() of a float ("1.0", "0.1", "1e+16", "inf", "nan").
std::string float_repr(double d);

}  // namespace tracelm::jinja::py
