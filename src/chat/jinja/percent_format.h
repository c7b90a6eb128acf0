// Python's printf-style formatting, `"%s: %d" % (name, n)`: conversions s r a d i u f F e E g G x X o c and %,
// with flags, width, precision and %(key)s mapping keys; `*` widths are refused.
#pragma once

#include <string>

#include "chat/jinja/runtime.h"
#include "chat/jinja/value.h"

namespace tracelm::jinja {

// Throws Error (Render) with Python's messages for missing, extra or mistyped arguments.
std::string percent_format(Runtime& rt, const std::string& format, const Value& args);

}  // namespace tracelm::jinja
