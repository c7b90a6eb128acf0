// A Jinja template as Hugging Face's apply_chat_template runs it: jinja2 3.1 in an ImmutableSandboxedEnvironment
// with trim_blocks, lstrip_blocks and the loopcontrols extension, transformers' tojson filter and its
// raise_exception and strftime_now globals, and the {% generation %} block. Parsed once; render() may run
// concurrently from many threads. Untrusted templates are bounded by Limits (limits.h).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/limits.h"
#include "chat/jinja/value.h"

namespace tracelm::jinja {

class Template {
   public:
    // Throws Error (Syntax, or Limit for a source over max_template_bytes).
    explicit Template(std::string_view source, const Limits& limits = {});

    // Renders with `variables` (the names the template reads: messages, add_generation_prompt, ...). `now` fixes
    // the time strftime_now reads, in UTC; by default it is the local time. Throws Error.
    std::string render(const std::vector<std::pair<std::string, Value>>& variables,
                       std::optional<std::time_t> now = std::nullopt) const;

    const Body& body() const { return *body_; }
    const Limits& limits() const { return limits_; }

   private:
    Limits limits_;
    std::shared_ptr<const Body> body_;
};

}  // namespace tracelm::jinja
