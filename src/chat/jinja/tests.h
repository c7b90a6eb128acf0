// jinja2's tests, the names after `is` (`x is defined`, `n is divisibleby 3`, `s is string`), with jinja2's
// semantics on Python values.
#pragma once

#include <string_view>

#include "chat/jinja/ast.h"

namespace tracelm::jinja {

// Null when there is no test of that name.
TestFn find_test(std::string_view name);

}  // namespace tracelm::jinja
