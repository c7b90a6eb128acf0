// Template values to and from JSON. Request JSON comes in as ordered_json, so dicts keep the order the client
// wrote (as Python's json.loads does); tojson is Python's json.dumps, which Hugging Face's tojson filter calls.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "chat/jinja/runtime.h"
#include "chat/jinja/value.h"

namespace tracelm::jinja {

Value from_json(const nlohmann::ordered_json& j);

// json.dumps(x, ensure_ascii, indent, separators, sort_keys).
struct DumpOptions {
    bool ensure_ascii = false;
    std::optional<std::string> indent;  // a number of spaces becomes that many spaces
    std::optional<std::string> item_separator, key_separator;  // defaults: ", " (or "," with indent) and ": "
    bool sort_keys = false;
};
// Throws Error for values JSON cannot hold (Undefined, callables, objects) and for non-string dict keys Python
// refuses.
std::string dumps(Runtime& rt, const Value& v, const DumpOptions& options);

}  // namespace tracelm::jinja
