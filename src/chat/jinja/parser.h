// Builds the tree of ast.h from lex()'s tokens, with jinja2's grammar and operator precedence. Templates may not
// load other templates: include, import, from, extends and block are refused. Nesting deeper than
// Limits::max_nesting is refused before it recurses further.
#pragma once

#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/lexer.h"
#include "chat/jinja/limits.h"

namespace tracelm::jinja {

// Throws Error (Syntax) naming the line and what was expected.
Body parse(const std::vector<Token>& tokens, const Limits& limits);

}  // namespace tracelm::jinja
