#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "runtime/untrusted.h"
#include "tokenizer/tokenizer.h"
#include "cli/commands.h"

namespace tracelm::cli {

namespace {
struct TokenizeArgs {
    std::string model, text, jsonl;
};

// A GGUF file carries its tokenizer in its metadata; a model folder has tokenizer.json.
Tokenizer load_tokenizer(const std::string& model) {
    if (std::filesystem::is_regular_file(model)) return Tokenizer::from_gguf(GgufFile(model));
    if (!std::filesystem::is_directory(model))
        throw std::runtime_error("model " + untrusted::wrong_kind(model, "a model folder or a .gguf file"));
    return Tokenizer::from_file((std::filesystem::path(model) / "tokenizer.json").string());
}

int run_tokenize(const TokenizeArgs& a) {
    const Tokenizer tok = load_tokenizer(a.model);
    if (a.jsonl.empty()) {
        std::cout << nlohmann::json(tok.encode(a.text)).dump() << "\n";
        return 0;
    }
    std::ifstream in(a.jsonl);
    if (!in) throw std::runtime_error("cannot open '" + a.jsonl + "'");
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (line.empty()) continue;
        const std::string where = a.jsonl + ":" + std::to_string(line_no) + ": ";
        nlohmann::json j;
        try {
            j = untrusted::parse_json(line);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(where + untrusted::escape(e.what(), 400));  // the message quotes the line
        }
        if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
            throw std::runtime_error(where + "expected a JSON object with a \"text\" string");
        }
        std::cout << nlohmann::json(tok.encode(j["text"].get<std::string>())).dump() << "\n";
    }
    return 0;
}
}  // namespace

Action add_tokenize(CLI::App& app) {
    auto a = std::make_shared<TokenizeArgs>();
    app.add_option("--model", a->model, "model folder holding tokenizer.json, or a .gguf file")->required()->check(CLI::ExistingPath);
    auto* text = app.add_option("--text", a->text, "text to tokenize");
    auto* jsonl = app.add_option("--jsonl", a->jsonl, "file with one {\"text\": ...} object per line")->check(CLI::ExistingFile);
    text->excludes(jsonl);
    app.callback([text, jsonl] {
        if (text->count() == 0 && jsonl->count() == 0) throw CLI::RequiredError("--text or --jsonl");
    });
    return [a] { return run_tokenize(*a); };
}

}  // namespace tracelm::cli
