// Splits template source into tokens exactly as jinja2's lexer does with the settings Hugging Face uses:
// trim_blocks (the newline after a block or comment tag goes), lstrip_blocks (spaces and tabs before a block or
// comment tag on its own line go), the "-" and "+" whitespace controls, newlines normalized to "\n" and one
// trailing newline dropped; {% raw %} sections come out as text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tracelm::jinja {

struct Token {
    enum class Type { Data, VariableBegin, VariableEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator,
                      Eof };
    Type type = Type::Eof;
    std::string text;  // data, a name, a string literal's value or an operator
    int64_t integer = 0;
    double number = 0;
    int line = 1;
};

// Throws Error (Syntax) naming the line of an unterminated tag, comment or string, or an unknown character.
std::vector<Token> lex(std::string_view source);

}  // namespace tracelm::jinja
