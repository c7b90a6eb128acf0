// Python's binary operators on template values: + - * / // % ** (jinja2's ** is left-associative, but each
// application is Python's), `in`, and the comparisons of a chain. Integers are 64-bit: a result Python would
// keep as a big integer is an error here.
#pragma once

#include <string_view>

#include "chat/jinja/runtime.h"
#include "chat/jinja/value.h"

namespace tracelm::jinja {

Value binary_op(Runtime& rt, std::string_view op, const Value& a, const Value& b);
Value negate(const Value& v, char op);  // unary - and +
// `needle in haystack`
bool contains(Runtime& rt, const Value& haystack, const Value& needle);
// One comparison of a chain: == != < <= > >= in notin.
bool compare_op(Runtime& rt, std::string_view op, const Value& a, const Value& b);

}  // namespace tracelm::jinja
