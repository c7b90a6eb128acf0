#include "chat/jinja/template.h"

#include "chat/jinja/error.h"
#include "chat/jinja/lexer.h"
#include "chat/jinja/parser.h"
#include "chat/jinja/renderer.h"
#include "chat/jinja/runtime.h"

namespace tracelm::jinja {

Template::Template(std::string_view source, const Limits& limits) : limits_(limits) {
    if (source.size() > limits_.max_template_bytes)
        throw Error(Error::Kind::Limit, "the template has " + std::to_string(source.size()) +
                                            " bytes, more than the limit of " +
                                            std::to_string(limits_.max_template_bytes));
    body_ = std::make_shared<const Body>(parse(lex(source), limits_));
}

std::string Template::render(const std::vector<std::pair<std::string, Value>>& variables,
                             std::optional<std::time_t> now) const {
    Runtime rt(limits_, now);
    Renderer r(rt, variables);
    return r.render(*body_);
}

}  // namespace tracelm::jinja
