// --chat-template FILE, for `generate --chat`, `chat` and `serve`: a Jinja file that replaces the model's chat
// template.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace tracelm::cli {

void add_chat_template_flag(CLI::App& app, std::string& path);

// The file's template text, checked to parse, so that a bad file stops a command before its model loads; "" when
// `path` is empty. Throws std::runtime_error naming the flag, the file and the problem.
std::string read_chat_template_flag(const std::string& path);

}  // namespace tracelm::cli
