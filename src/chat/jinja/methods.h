// The Python methods of str, list and dict that chat templates call (`content.strip()`, `s.split('\n')`,
// `d.items()`, `d.get(k)`), with Python's semantics. Methods that mutate (list.append, dict.update, ...) are
// refused, as in jinja2's ImmutableSandboxedEnvironment.
#pragma once

#include <string_view>

#include "chat/jinja/runtime.h"
#include "chat/jinja/value.h"

namespace tracelm::jinja {

enum class MethodKind { None, Safe, Unsafe };
// Whether `self` (a str, list, tuple or dict) has a Python attribute `name` that is a method, and whether the
// sandbox allows calling it.
MethodKind method_kind(const Value& self, std::string_view name);
// Calls self.name(args); throws Error for a method tracelm does not implement or bad arguments.
Value call_method(Runtime& rt, const Value& self, std::string_view name, CallArgs& args);
// self.name as a value (a bound method), or the unsafe-attribute Undefined that fails when called.
Value bound_method(const Value& self, std::string_view name);

}  // namespace tracelm::jinja
