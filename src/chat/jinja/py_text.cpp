#include "chat/jinja/py_text.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>

namespace tracelm::jinja::py {

char32_t decode(std::string_view s, size_t i, size_t* len) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    utf8proc_int32_t cp = -1;
    const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                                static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0 || cp < 0) {
        *len = 1;
        return c;  // a stray byte stands for itself
    }
    *len = static_cast<size_t>(n);
    return static_cast<char32_t>(cp);
}

void append_utf8(std::string& out, char32_t cp) {
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

bool is_ascii(std::string_view s) {
    for (const char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    return true;
}

size_t length(std::string_view s) {
    if (is_ascii(s)) return s.size();
    size_t n = 0;
    for (size_t i = 0, len = 0; i < s.size(); i += len, ++n) decode(s, i, &len);
    return n;
}

std::vector<size_t> offsets(std::string_view s) {
    std::vector<size_t> out;
    out.reserve(s.size() + 1);
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
        decode(s, i, &len);
        out.push_back(i);
    }
    out.push_back(s.size());
    return out;
}

namespace {

utf8proc_category_t category(char32_t cp) {
    return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool is_cased(char32_t cp) {
    const utf8proc_category_t c = category(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

template <typename Map>
std::string map_chars(std::string_view s, Map map) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0, len = 0; i < s.size(); i += len) append_utf8(out, map(decode(s, i, &len), i));
    return out;
}

char32_t to_upper(char32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_lower(char32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
char32_t to_title(char32_t cp) {
    if (cp < 0x80) return to_upper(cp);
    return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

bool in_chars(char32_t cp, std::string_view chars) {
    for (size_t i = 0, len = 0; i < chars.size(); i += len)
        if (decode(chars, i, &len) == cp) return true;
    return false;
}

// The start of the last code point before byte `end`.
size_t prev_start(std::string_view s, size_t end) {
    size_t i = end - 1;
    while (i > 0 && end - i < 4 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    size_t len = 0;
    decode(s, i, &len);
    return i + len == end ? i : end - 1;
}

}  // namespace

bool is_space(char32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1C && cp <= 0x1F);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_printable(char32_t cp) {
    if (cp < 0x80) return cp >= 0x20 && cp < 0x7F;
    switch (category(cp)) {
        case UTF8PROC_CATEGORY_CC:
        case UTF8PROC_CATEGORY_CF:
        case UTF8PROC_CATEGORY_CS:
        case UTF8PROC_CATEGORY_CO:
        case UTF8PROC_CATEGORY_CN:
        case UTF8PROC_CATEGORY_ZL:
        case UTF8PROC_CATEGORY_ZP:
        case UTF8PROC_CATEGORY_ZS:
            return false;
        default:
            return true;
    }
}

bool is_alpha(char32_t cp) {
    const utf8proc_category_t c = category(cp);
    return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}
bool is_digit(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ND; }
bool is_alnum(char32_t cp) {
    const utf8proc_category_t c = category(cp);
    return is_alpha(cp) || c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}
bool is_upper(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_LU || category(cp) == UTF8PROC_CATEGORY_LT; }
bool is_lower(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_LL; }

namespace {

bool str_case(std::string_view s, bool upper) {
    bool cased = false;
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
        const char32_t cp = decode(s, i, &len);
        if (is_upper(cp) || is_lower(cp)) {
            if (upper ? is_lower(cp) : is_upper(cp)) return false;
            cased = true;
        }
    }
    return cased;
}

}  // namespace

bool str_isupper(std::string_view s) { return str_case(s, true); }
bool str_islower(std::string_view s) { return str_case(s, false); }

std::string upper(std::string_view s) {
    return map_chars(s, [](char32_t cp, size_t) { return to_upper(cp); });
}
std::string lower(std::string_view s) {
    return map_chars(s, [](char32_t cp, size_t) { return to_lower(cp); });
}

std::string title(std::string_view s) {
    bool previous_cased = false;
    return map_chars(s, [&](char32_t cp, size_t) {
        const char32_t out = previous_cased ? to_lower(cp) : to_title(cp);
        previous_cased = is_cased(cp);
        return out;
    });
}

std::string capitalize(std::string_view s) {
    return map_chars(s, [](char32_t cp, size_t at) { return at == 0 ? to_title(cp) : to_lower(cp); });
}

std::string_view strip(std::string_view s, const std::string* chars, bool left, bool right) {
    const auto drop = [&](char32_t cp) { return chars ? in_chars(cp, *chars) : is_space(cp); };
    size_t b = 0, e = s.size();
    if (left) {
        for (size_t len = 0; b < e; b += len)
            if (!drop(decode(s, b, &len))) break;
    }
    if (right) {
        while (e > b) {
            const size_t start = prev_start(s, e);
            size_t len = 0;
            if (!drop(decode(s, start, &len))) break;
            e = start;
        }
    }
    return s.substr(b, e - b);
}

namespace {

std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
    std::vector<std::string> parts;
    if (!from_right) {
        size_t i = 0, len = 0;
        while (true) {
            while (i < s.size() && is_space(decode(s, i, &len))) i += len;
            if (i >= s.size()) break;
            if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
                parts.emplace_back(s.substr(i));
                break;
            }
            const size_t start = i;
            while (i < s.size() && !is_space(decode(s, i, &len))) i += len;
            parts.emplace_back(s.substr(start, i - start));
        }
        return parts;
    }
    size_t e = s.size();
    while (true) {
        while (e > 0) {
            const size_t st = prev_start(s, e);
            size_t len = 0;
            if (!is_space(decode(s, st, &len))) break;
            e = st;
        }
        if (e == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
            parts.emplace_back(s.substr(0, e));
            break;
        }
        size_t b = e;
        while (b > 0) {
            const size_t st = prev_start(s, b);
            size_t len = 0;
            if (is_space(decode(s, st, &len))) break;
            b = st;
        }
        parts.emplace_back(s.substr(b, e - b));
        e = b;
    }
    return {parts.rbegin(), parts.rend()};
}

}  // namespace

std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right) {
    if (!sep) return split_whitespace(s, maxsplit, from_right);
    std::vector<std::string> parts;
    if (!from_right) {
        size_t start = 0;
        while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
            const size_t at = s.find(*sep, start);
            if (at == std::string_view::npos) break;
            parts.emplace_back(s.substr(start, at - start));
            start = at + sep->size();
        }
        parts.emplace_back(s.substr(start));
        return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        const size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
    }
    parts.emplace_back(s.substr(0, end));
    return {parts.rbegin(), parts.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
    std::vector<std::string> lines;
    size_t start = 0, i = 0;
    while (i < s.size()) {
        size_t len = 0;
        const char32_t cp = decode(s, i, &len);
        const bool boundary = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
                              cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!boundary) {
            i += len;
            continue;
        }
        size_t end = i + len;
        if (cp == '\r' && end < s.size() && s[end] == '\n') ++end;
        lines.emplace_back(s.substr(start, (keepends ? end : i) - start));
        start = i = end;
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    return lines;
}

std::string html_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (const char ch : s) {
        switch (ch) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += ch;
        }
    }
    return out;
}

std::string repr(std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const char quote = has_single && s.find('"') == std::string_view::npos ? '"' : '\'';
    std::string out(1, quote);
    char buf[16];
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
        const char32_t cp = decode(s, i, &len);
        if (cp == static_cast<char32_t>(quote) || cp == '\\') {
            out += '\\';
            out += static_cast<char>(cp);
        } else if (cp == '\t') {
            out += "\\t";
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (is_printable(cp)) {
            out.append(s.substr(i, len));
        } else {
            const char* fmt = cp <= 0xFF ? "\\x%02x" : cp <= 0xFFFF ? "\\u%04x" : "\\U%08x";
            std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned>(cp));
            out += buf;
        }
    }
    out += quote;
    return out;
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    // The shortest digits that round-trip, laid out as Python does: positional for exponents -4..15, else
    // scientific with a sign and at least two exponent digits.
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    const std::string sci(buf, res.ptr);
    const size_t e_at = sci.find('e');
    std::string mantissa = sci.substr(0, e_at);
    const int exp = std::stoi(sci.substr(e_at + 1));
    const bool negative = mantissa[0] == '-';
    if (negative) mantissa.erase(0, 1);
    std::string digits;
    for (const char c : mantissa)
        if (c != '.') digits += c;
    std::string out = negative ? "-" : "";
    if (exp >= -4 && exp < 16) {
        const auto point = static_cast<size_t>(exp + 1);  // digits before the point (0 for exp == -1)
        if (exp < 0) {
            out.append("0.").append(static_cast<size_t>(-exp - 1), '0').append(digits);
        } else if (point >= digits.size()) {
            out.append(digits).append(point - digits.size(), '0').append(".0");
        } else {
            out.append(digits, 0, point).append(".").append(digits, point);
        }
        return out;
    }
    out += digits[0];
    if (digits.size() > 1) out.append(".").append(digits, 1);
    std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + buf;
}

}  // namespace tracelm::jinja::py
