// The normalizer of a tokenizer.json: Unicode normal forms (NFC, NFD, NFKC, NFKD) and Replace of a literal
// string (SentencePiece-style files such as Gemma's replace " " with "▁"), in the order the file lists them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tokenizer/utf8.h"

namespace tracelm::tokenizer_detail {

class Normalizer {
   public:
    // A chain of normal forms is one pass (see add_form), but every Replace is a pass of its own, so a file may
    // list at most this many steps apart from chained forms.
    static constexpr size_t kMaxSteps = 64;

    // Throws std::runtime_error beyond kMaxSteps.
    void add_form(NormalForm form);
    // Replaces every occurrence of `pattern` (non-empty), left to right, as Hugging Face's Replace with a String
    // pattern. Throws std::runtime_error for an empty pattern or beyond kMaxSteps.
    void add_replace(std::string pattern, std::string content);

    // `text` must be valid UTF-8.
    std::string apply(std::string_view text) const;

   private:
    struct Replace {
        std::string pattern, content;
    };
    void add(std::variant<NormalForm, Replace> step);

    std::vector<std::variant<NormalForm, Replace>> steps_;
};

}  // namespace tracelm::tokenizer_detail
