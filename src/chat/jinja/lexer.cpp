#include "chat/jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "chat/jinja/error.h"
#include "chat/jinja/py_text.h"

namespace tracelm::jinja {

namespace {

[[noreturn]] void syntax(const std::string& message, int line) { throw Error(Error::Kind::Syntax, message, line); }

// jinja2 reads "\r\n", "\r" and "\n" as one newline and drops one newline at the very end.
std::string normalize(std::string_view source) {
    std::string s;
    s.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            s += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        } else {
            s += source[i];
        }
    }
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
}

bool all_space(std::string_view s) {
    if (s.empty()) return false;
    for (size_t i = 0, len = 0; i < s.size(); i += len)
        if (!py::is_space(py::decode(s, i, &len))) return false;
    return true;
}

size_t skip_space(std::string_view s, size_t i) {
    for (size_t len = 0; i < s.size(); i += len)
        if (!py::is_space(py::decode(s, i, &len))) break;
    return i;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// A string literal's body with Python's unicode-escape rules, as jinja2 decodes it.
std::string unescape(std::string_view body, int line) {
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
        if (body[i] != '\\' || i + 1 == body.size()) {
            out += body[i];
            continue;
        }
        const char c = body[++i];
        switch (c) {
            case '\n': break;
            case '\\': out += '\\'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case 'a': out += '\a'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'v': out += '\v'; break;
            case 'x':
            case 'u':
            case 'U': {
                const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
                char32_t cp = 0;
                for (size_t k = 1; k <= n; ++k) {
                    const int d = i + k < body.size() ? hex_digit(body[i + k]) : -1;
                    if (d < 0) syntax(std::string("truncated \\") + c + " escape in a string", line);
                    cp = cp * 16 + static_cast<char32_t>(d);
                }
                if (cp > 0x10FFFF) syntax("illegal Unicode character in a string", line);
                py::append_utf8(out, cp);
                i += n;
                break;
            }
            default:
                if (c >= '0' && c <= '7') {
                    char32_t cp = 0;
                    size_t k = 0;
                    for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k)
                        cp = cp * 8 + static_cast<char32_t>(body[i + k] - '0');
                    py::append_utf8(out, cp);
                    i += k - 1;
                } else {
                    out += '\\';  // an unknown escape stays as written
                    out += c;
                }
        }
    }
    return out;
}

class Lexer {
   public:
    explicit Lexer(std::string_view source) : s_(normalize(source)) {}

    std::vector<Token> run() {
        while (pos_ < s_.size()) {
            const size_t start = find_tag(pos_);
            if (start == std::string::npos) {
                data(s_.substr(pos_), line_);
                advance_to(s_.size());
                break;
            }
            const char kind = s_[start + 1];
            const char sign = start + 2 < s_.size() && (s_[start + 2] == '-' || s_[start + 2] == '+') ? s_[start + 2]
                                                                                                      : '\0';
            size_t raw_end = 0;
            const bool raw = kind == '%' && raw_begin(start + 2 + (sign ? 1 : 0), &raw_end);
            data(strip_before(s_.substr(pos_, start - pos_), sign, kind != '{'), line_);
            advance_to(start + 2 + (sign ? 1 : 0));
            if (raw) {
                advance_to(raw_end);
                lex_raw();
            } else if (kind == '#') {
                lex_comment();
            } else {
                lex_tag(kind == '%');
            }
        }
        Token eof;
        eof.line = line_;
        tokens_.push_back(eof);
        return std::move(tokens_);
    }

   private:
    // The next "{{", "{%" or "{#" at or after i.
    size_t find_tag(size_t i) const {
        for (size_t at = s_.find('{', i); at != std::string::npos; at = s_.find('{', at + 1))
            if (at + 1 < s_.size() && (s_[at + 1] == '{' || s_[at + 1] == '%' || s_[at + 1] == '#')) return at;
        return std::string::npos;
    }

    // The text before a tag, as the tag's whitespace control and lstrip_blocks leave it.
    std::string strip_before(std::string_view text, char sign, bool lstrip_applies) const {
        if (sign == '-') return std::string(py::strip(text, nullptr, false, true));
        if (sign != '+' && lstrip_applies) {
            const size_t l_pos = text.rfind('\n') + 1;  // 0 when there is none
            if ((l_pos > 0 || line_starting_) && all_space(text.substr(l_pos)))
                return std::string(text.substr(0, l_pos));
        }
        return std::string(text);
    }

    // "{%" already seen; whether "[-+]? raw [-]%}" follows from i (end: just past it, the whitespace
    // control applied).
    bool raw_begin(size_t i, size_t* end) const {
        i = skip_space(s_, i);
        if (s_.compare(i, 3, "raw") != 0) return false;
        i = skip_space(s_, i + 3);
        if (s_.compare(i, 3, "-%}") == 0) {
            *end = skip_space(s_, i + 3);
            return true;
        }
        if (s_.compare(i, 2, "%}") == 0) {
            *end = i + 2;
            return true;
        }
        return false;
    }

    void lex_raw() {
        const int line = line_;
        for (size_t at = s_.find("{%", pos_); at != std::string::npos; at = s_.find("{%", at + 1)) {
            size_t i = at + 2;
            const char sign = i < s_.size() && (s_[i] == '-' || s_[i] == '+') ? s_[i++] : '\0';
            i = skip_space(s_, i);
            if (s_.compare(i, 6, "endraw") != 0) continue;
            i = skip_space(s_, i + 6);
            size_t end = 0;
            if (!block_end(i, &end)) continue;
            data(strip_before(s_.substr(pos_, at - pos_), sign, true), line);
            advance_to(end);
            return;
        }
        syntax("missing end of raw directive", line);
    }

    void lex_comment() {
        const int line = line_;
        for (size_t i = pos_; i < s_.size(); ++i) {
            size_t end = 0;
            if (s_.compare(i, 3, "+#}") == 0) {
                end = i + 3;
            } else if (s_.compare(i, 3, "-#}") == 0) {
                end = skip_space(s_, i + 3);
            } else if (s_.compare(i, 2, "#}") == 0) {
                end = i + 2 < s_.size() && s_[i + 2] == '\n' ? i + 3 : i + 2;
            } else {
                continue;
            }
            advance_to(end);
            return;
        }
        syntax("missing end of comment tag", line);
    }

    // A block end at i ("+%}", "-%}" with the whitespace after it, "%}" with one newline after it).
    bool block_end(size_t i, size_t* end) const {
        if (s_.compare(i, 3, "+%}") == 0) {
            *end = i + 3;
        } else if (s_.compare(i, 3, "-%}") == 0) {
            *end = skip_space(s_, i + 3);
        } else if (s_.compare(i, 2, "%}") == 0) {
            *end = i + 2 < s_.size() && s_[i + 2] == '\n' ? i + 3 : i + 2;
        } else {
            return false;
        }
        return true;
    }

    bool variable_end(size_t i, size_t* end) const {
        if (s_.compare(i, 3, "-}}") == 0) {
            *end = skip_space(s_, i + 3);
        } else if (s_.compare(i, 2, "}}") == 0) {
            *end = i + 2;
        } else {
            return false;
        }
        return true;
    }

    void lex_tag(bool block) {
        const int begin_line = line_;
        push(block ? Token::Type::BlockBegin : Token::Type::VariableBegin, "", begin_line);
        std::string balance;
        while (true) {
            if (pos_ >= s_.size()) syntax(block ? "unexpected end of template inside a block tag"
                                                : "unexpected end of template inside a variable tag", begin_line);
            size_t end = 0;
            if (balance.empty() && (block ? block_end(pos_, &end) : variable_end(pos_, &end))) {
                push(block ? Token::Type::BlockEnd : Token::Type::VariableEnd, "", line_);
                advance_to(end);
                return;
            }
            const size_t ws = skip_space(s_, pos_);
            if (ws > pos_) {
                advance_to(ws);
                continue;
            }
            if (number() || name() || string()) continue;
            op(balance);
        }
    }

    bool name() {
        const char c = s_[pos_];
        if (!(std::isalpha(static_cast<unsigned char>(c)) || c == '_')) return false;
        size_t e = pos_ + 1;
        while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        push(Token::Type::Name, s_.substr(pos_, e - pos_), line_);
        advance_to(e);
        return true;
    }

    bool string() {
        const char q = s_[pos_];
        if (q != '\'' && q != '"') return false;
        size_t e = pos_ + 1;
        while (e < s_.size() && s_[e] != q) e += s_[e] == '\\' ? 2 : 1;
        if (e >= s_.size()) syntax("unterminated string", line_);
        push(Token::Type::String, unescape(std::string_view(s_).substr(pos_ + 1, e - pos_ - 1), line_), line_);
        advance_to(e + 1);
        return true;
    }

    // Digits with single underscores between them, from i; returns the end (i when none).
    size_t digits(size_t i, int (*digit)(char)) const {
        size_t e = i;
        while (e < s_.size() && digit(s_[e]) >= 0) {
            ++e;
            if (e + 1 < s_.size() && s_[e] == '_' && digit(s_[e + 1]) >= 0) ++e;
        }
        return e;
    }

    static int dec(char c) { return c >= '0' && c <= '9' ? c - '0' : -1; }

    bool number() {
        if (dec(s_[pos_]) < 0) return false;
        const size_t int_end = digits(pos_, dec);
        size_t e = int_end;
        // A float: digits "." digits [exponent] or digits exponent (jinja2's float_re; not right after a dot).
        const bool after_dot = pos_ > 0 && s_[pos_ - 1] == '.';
        if (!after_dot && e + 1 < s_.size() && s_[e] == '.' && dec(s_[e + 1]) >= 0) e = digits(e + 1, dec);
        size_t exp_end = e;
        if (!after_dot && e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
            size_t k = e + 1;
            if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
            if (k < s_.size() && dec(s_[k]) >= 0) exp_end = digits(k, dec);
        }
        std::string text;
        if (exp_end > int_end) {
            for (size_t i = pos_; i < exp_end; ++i)
                if (s_[i] != '_') text += s_[i];
            Token t;
            t.type = Token::Type::Float;
            t.number = std::strtod(text.c_str(), nullptr);
            t.line = line_;
            tokens_.push_back(std::move(t));
            advance_to(exp_end);
            return true;
        }
        return integer();
    }

    bool integer() {
        int base = 10;
        size_t i = pos_;
        if (s_[i] == '0' && i + 1 < s_.size()) {
            const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[i + 1])));
            base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 10;
            if (base != 10) i += 2;
        }
        // jinja2's integer_re: a prefix and digits with single underscores before them, or a decimal number
        // that starts with 1-9, or zeros.
        const bool zeros = base == 10 && s_[i] == '0';
        std::string text;
        size_t e = i;
        while (e < s_.size()) {
            const size_t at = s_[e] == '_' && text.size() + (base != 10) > 0 ? e + 1 : e;
            const int d = at < s_.size() ? hex_digit(s_[at]) : -1;
            if (d < 0 || d >= base || (zeros && d != 0)) break;
            text += s_[at];
            e = at + 1;
        }
        if (text.empty()) syntax("invalid integer literal", line_);
        errno = 0;
        const long long v = std::strtoll(text.c_str(), nullptr, base);
        if (errno == ERANGE) syntax("integer literal too large: " + s_.substr(pos_, e - pos_), line_);
        Token t;
        t.type = Token::Type::Integer;
        t.integer = v;
        t.line = line_;
        tokens_.push_back(std::move(t));
        advance_to(e);
        return true;
    }

    void op(std::string& balance) {
        static const char* const kTwo[] = {"**", "//", "==", "!=", ">=", "<="};
        for (const char* o : kTwo) {
            if (s_.compare(pos_, 2, o) == 0) {
                push(Token::Type::Operator, o, line_);
                advance_to(pos_ + 2);
                return;
            }
        }
        const char c = s_[pos_];
        if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
            syntax("unexpected char '" + py::repr(s_.substr(pos_, 1)) + "'", line_);
        if (c == '(' || c == '[' || c == '{') {
            balance += c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (c == ')' || c == ']' || c == '}') {
            if (balance.empty()) syntax(std::string("unexpected '") + c + "'", line_);
            if (balance.back() != c)
                syntax(std::string("unexpected '") + c + "', expected '" + balance.back() + "'", line_);
            balance.pop_back();
        }
        push(Token::Type::Operator, std::string(1, c), line_);
        advance_to(pos_ + 1);
    }

    void data(std::string text, int line) {
        if (!text.empty()) push(Token::Type::Data, std::move(text), line);
    }

    void push(Token::Type type, std::string text, int line) {
        Token t;
        t.type = type;
        t.text = std::move(text);
        t.line = line;
        tokens_.push_back(std::move(t));
    }

    void advance_to(size_t end) {
        for (size_t i = pos_; i < end; ++i)
            if (s_[i] == '\n') ++line_;
        if (end > pos_) line_starting_ = s_[end - 1] == '\n';
        pos_ = end;
    }

    std::string s_;
    size_t pos_ = 0;
    int line_ = 1;
    bool line_starting_ = true;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace tracelm::jinja
