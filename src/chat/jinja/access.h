// Attribute and item lookup as jinja2's sandboxed environment does it: `x.name` tries the Python attribute first
// (a method such as dict.items) and then the item; `x[key]` tries the item first and then the attribute. What
// neither finds is Undefined, except on Undefined itself, which is an error.
#pragma once

#include <string_view>

#include "chat/jinja/runtime.h"
#include "chat/jinja/value.h"

namespace tracelm::jinja {

Value get_attr(Runtime& rt, const Value& obj, std::string_view name);
Value get_item(Runtime& rt, const Value& obj, const Value& key);
// obj[start:stop:step] of a list, tuple or string (each bound may be None or Undefined: absent).
Value get_slice(Runtime& rt, const Value& obj, const Value& start, const Value& stop, const Value& step);
// The value of a dotted attribute path ("a.b", "0.name") looked up item-first at each step, as jinja2's
// make_attrgetter does for the attribute= arguments of filters; with a fallback (not None), an Undefined step
// becomes the fallback.
Value get_path(Runtime& rt, const Value& obj, std::string_view path, const Value* fallback = nullptr);
// getattr(obj, name) alone, without the item lookup (jinja2's attr filter).
Value python_attr(const Value& obj, std::string_view name);

}  // namespace tracelm::jinja
