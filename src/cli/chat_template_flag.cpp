#include "cli/chat_template_flag.h"

#include <stdexcept>

#include "chat/jinja/error.h"
#include "chat/jinja/template.h"
#include "runtime/untrusted.h"

namespace tracelm::cli {

void add_chat_template_flag(CLI::App& app, std::string& path) {
    app.add_option("--chat-template", path,
                   "a Jinja chat template file to use instead of the model's own (Hugging Face's format)");
}

std::string read_chat_template_flag(const std::string& path) {
    if (path.empty()) return "";
    const jinja::Limits limits;
    std::string text;
    try {
        text = untrusted::read_regular_file(path, limits.max_template_bytes);
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("--chat-template: ") + e.what());
    }
    try {
        const jinja::Template parsed(text, limits);
    } catch (const jinja::Error& e) {
        throw std::runtime_error("--chat-template " + untrusted::escape(path) + ": the template does not parse: " +
                                 e.what());
    }
    return text;
}

}  // namespace tracelm::cli
