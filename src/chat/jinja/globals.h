// The global names of Hugging Face's template environment: jinja2's range, dict, namespace, cycler and joiner,
// and the raise_exception and strftime_now functions transformers adds. jinja2's random lipsum is left out.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace tracelm::jinja {

// jinja2's sandbox refuses ranges longer than this.
constexpr int64_t kMaxRange = 100000;

const std::vector<std::pair<std::string, Value>>& builtin_globals();

}  // namespace tracelm::jinja
