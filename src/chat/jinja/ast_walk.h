// Visits every statement and expression of a parsed body, depth first, each statement before its parts: for the
// facts a caller reads off a template without rendering it (which names a macro uses, what a loop iterates).
#pragma once

#include <functional>

#include "chat/jinja/ast.h"

namespace tracelm::jinja {

void walk(const Body& body, const std::function<void(const Stmt&)>& on_stmt,
          const std::function<void(const Expr&)>& on_expr);

}  // namespace tracelm::jinja
