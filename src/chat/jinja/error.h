// The one error type of the template engine. Its kind says whose fault it is: the template's text (Syntax), an
// operation Python would refuse while rendering (Render), the template's own raise_exception (Raised), or one
// of the limits of limits.h (Limit).
#pragma once

#include <stdexcept>
#include <string>

namespace tracelm::jinja {

class Error : public std::runtime_error {
   public:
    enum class Kind { Syntax, Render, Raised, Limit };

    Error(Kind kind, const std::string& message, int line = 0)
        : std::runtime_error(line > 0 ? "line " + std::to_string(line) + ": " + message : message),
          kind_(kind),
          message_(message),
          line_(line) {}

    Kind kind() const { return kind_; }
    const std::string& message() const { return message_; }  // without the line
    int line() const { return line_; }
    Error at_line(int line) const { return line_ > 0 || line <= 0 ? *this : Error(kind_, message_, line); }

   private:
    Kind kind_;
    std::string message_;
    int line_;
};

[[noreturn]] inline void fail(const std::string& message) { throw Error(Error::Kind::Render, message); }

}  // namespace tracelm::jinja
