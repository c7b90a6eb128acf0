// jinja2's filters that chat templates use (trim, length, join, map, selectattr, sort, indent, ...), with jinja2
// 3.1's semantics, and Hugging Face's tojson (Python's json.dumps: ", " and ": " separators, keys in their order,
// non-ASCII kept).
#pragma once

#include <string_view>

#include "chat/jinja/ast.h"

namespace tracelm::jinja {

// Null when there is no filter of that name.
FilterFn find_filter(std::string_view name);

}  // namespace tracelm::jinja
