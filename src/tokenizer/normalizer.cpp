#include "tokenizer/normalizer.h"

#include <stdexcept>

namespace tracelm::tokenizer_detail {

namespace {

bool is_compatibility(NormalForm f) { return f == NormalForm::NFKC || f == NormalForm::NFKD; }
bool is_composed(NormalForm f) { return f == NormalForm::NFC || f == NormalForm::NFKC; }

}  // namespace

void Normalizer::add_form(NormalForm form) {
    // Normal forms in a row equal one form: compatibility if any step is, composed or decomposed as the last step
    // is (each form's result depends only on the text's equivalence class, and compatibility equivalence is
    // coarser than canonical). So a file listing 100,000 of them costs one pass per text.
    if (!steps_.empty()) {
        if (auto* last = std::get_if<NormalForm>(&steps_.back())) {
            const bool compat = is_compatibility(*last) || is_compatibility(form);
            *last = compat ? (is_composed(form) ? NormalForm::NFKC : NormalForm::NFKD)
                           : (is_composed(form) ? NormalForm::NFC : NormalForm::NFD);
            return;
        }
    }
    add(form);
}

void Normalizer::add_replace(std::string pattern, std::string content) {
    if (pattern.empty()) throw std::runtime_error("a Replace normalizer with an empty pattern is not supported");
    add(Replace{std::move(pattern), std::move(content)});
}

void Normalizer::add(std::variant<NormalForm, Replace> step) {
    if (steps_.size() == kMaxSteps) {
        throw std::runtime_error("is one step too many (at most " + std::to_string(kMaxSteps) +
                                 " Replace steps and chains of normal forms)");
    }
    steps_.push_back(std::move(step));
}

std::string Normalizer::apply(std::string_view text) const {
    std::string out(text);
    for (const auto& step : steps_) {
        if (const auto* form = std::get_if<NormalForm>(&step)) {
            out = unicode_normalize(out, *form);
            continue;
        }
        const auto& [pattern, content] = std::get<Replace>(step);
        std::string replaced;
        size_t from = 0;
        for (size_t at; (at = out.find(pattern, from)) != std::string::npos; from = at + pattern.size()) {
            replaced.append(out, from, at - from).append(content);
        }
        out = std::move(replaced.append(out, from));
    }
    return out;
}

}  // namespace tracelm::tokenizer_detail
