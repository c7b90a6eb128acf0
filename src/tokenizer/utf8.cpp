#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace tracelm::tokenizer_detail {

namespace {

struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};

}  // namespace

Utf8Unit scan_utf8(std::string_view s, size_t pos) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char b0 = byte(pos);
    if (b0 < 0x80) return {Utf8Kind::Valid, 1, b0};

    // Well-formed sequences per Unicode table 3-7: the lead byte fixes the length and the
    // allowed range of the second byte; every later byte is 80..BF.
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    char32_t cp;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
        cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;  // excludes surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;  // caps at U+10FFFF
    } else {
        return {Utf8Kind::Invalid, 1, 0};
    }
    for (size_t i = 1; i < need; ++i) {
        if (pos + i >= s.size()) return {Utf8Kind::Incomplete, i, 0};
        const unsigned char b = byte(pos + i);
        if (b < lo || b > hi) return {Utf8Kind::Invalid, i, 0};
        cp = (cp << 6) | (b & 0x3F);
        lo = 0x80;
        hi = 0xBF;
    }
    return {Utf8Kind::Valid, need, cp};
}

bool is_valid_utf8(std::string_view s) {
    for (size_t pos = 0; pos < s.size();) {
        if (static_cast<unsigned char>(s[pos]) < 0x80) {
            ++pos;
            continue;
        }
        const Utf8Unit u = scan_utf8(s, pos);
        if (u.kind != Utf8Kind::Valid) return false;
        pos += u.len;
    }
    return true;
}

size_t append_utf8_lossy(std::string_view in, std::string& out, bool final) {
    static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    size_t pos = 0;
    while (pos < in.size()) {
        const Utf8Unit u = scan_utf8(in, pos);
        if (u.kind == Utf8Kind::Incomplete && !final) break;
        if (u.kind == Utf8Kind::Valid) {
            out.append(in.substr(pos, u.len));
        } else {
            out.append(kReplacement);
        }
        pos += u.len;
    }
    return pos;
}

std::string to_valid_utf8(std::string_view in) {
    std::string out;
    out.reserve(in.size());
    append_utf8_lossy(in, out, /*final=*/true);
    return out;
}

void append_utf8(char32_t c, std::string& out) {
    if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

std::string unicode_normalize(std::string_view text, NormalForm form) {
    int options = UTF8PROC_STABLE;
    switch (form) {
        case NormalForm::NFC:
            options |= UTF8PROC_COMPOSE;
            break;
        case NormalForm::NFD:
            options |= UTF8PROC_DECOMPOSE;
            break;
        case NormalForm::NFKC:
            options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
            break;
        case NormalForm::NFKD:
            options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
            break;
    }
    // ASCII characters are unchanged by every normal form and nothing composes onto them, so
    // the text may be cut before any ASCII byte: only the runs from the character before a
    // non-ASCII byte up to the next ASCII byte go through utf8proc.
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
        size_t begin = pos;
        while (begin < text.size() && static_cast<unsigned char>(text[begin]) < 0x80) ++begin;
        if (begin == text.size()) {
            out.append(text.substr(pos));
            break;
        }
        if (begin > pos) --begin;  // the ASCII character a combining mark may attach to
        size_t end = begin + 1;
        while (end < text.size() && static_cast<unsigned char>(text[end]) >= 0x80) ++end;
        out.append(text.substr(pos, begin - pos));

        utf8proc_uint8_t* raw = nullptr;
        // An explicit length (no UTF8PROC_NULLTERM) keeps embedded NUL characters.
        const utf8proc_ssize_t n =
            utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + begin),
                         static_cast<utf8proc_ssize_t>(end - begin), &raw,
                         static_cast<utf8proc_option_t>(options));
        const std::unique_ptr<utf8proc_uint8_t, FreeDeleter> owned(raw);
        if (n < 0) {
            throw std::runtime_error(std::string("tokenizer: Unicode normalization failed: ") +
                                     utf8proc_errmsg(n));
        }
        out.append(reinterpret_cast<const char*>(raw), static_cast<size_t>(n));
        pos = end;
    }
    return out;
}

bool is_unicode_whitespace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_MN:
        case UTF8PROC_CATEGORY_MC:
        case UTF8PROC_CATEGORY_ME:
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_PC:
            return true;
        default:
            return false;
    }
}

}  // namespace tracelm::tokenizer_detail
