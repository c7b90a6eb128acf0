#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/utf8.h"

namespace tracelm::tokenizer_detail {

namespace {

struct ByteLevelTables {
    std::array<char32_t, 256> byte_to_char{};
    std::array<int16_t, 256 + 68> char_to_byte{};  // -1: not in the alphabet

    ByteLevelTables() {
        char_to_byte.fill(-1);
        char32_t next_extra = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const char32_t c = printable ? static_cast<char32_t>(b) : next_extra++;
            byte_to_char[static_cast<size_t>(b)] = c;
            char_to_byte[c] = static_cast<int16_t>(b);
        }
    }
};

const ByteLevelTables& tables() {
    static const ByteLevelTables t;
    return t;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
    const ByteLevelTables& t = tables();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) append_utf8(t.byte_to_char[b], out);
    return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
    const ByteLevelTables& t = tables();
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        const Utf8Unit u = scan_utf8(text, pos);
        if (u.kind != Utf8Kind::Valid || u.codepoint >= t.char_to_byte.size()) return std::nullopt;
        const int16_t b = t.char_to_byte[u.codepoint];
        if (b < 0) return std::nullopt;
        out.push_back(static_cast<char>(b));
        pos += u.len;
    }
    return out;
}

}  // namespace tracelm::tokenizer_detail
