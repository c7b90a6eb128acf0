// Pre-tokenization: splitting normalized text into pieces that BPE encodes independently,
// following the Hugging Face `Split` and `ByteLevel` pre-tokenizers. Patterns are compiled with
// PCRE2 in UTF + UCP mode, so \p{L}, \s and friends have their Unicode meaning as in the
// Oniguruma engine the reference implementation uses.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tracelm::tokenizer_detail {

// Rewrites \s and \S to the Unicode White_Space set, which is what they mean in Oniguruma (the
// reference's engine); PCRE2 10.42 also counts U+180E MONGOLIAN VOWEL SEPARATOR as space. \S
// inside a character class (rare) is left to PCRE2.
std::string oniguruma_compatible_pattern(std::string_view pattern);

class Regex {
   public:
    // Throws std::runtime_error with PCRE2's message (and offset) for a bad pattern.
    // literal = true matches `pattern` as plain text.
    Regex(std::string_view pattern, bool literal);
    Regex(Regex&&) noexcept;
    Regex& operator=(Regex&&) noexcept;
    ~Regex();

    // The non-empty, non-overlapping matches in `text` (valid UTF-8), as [begin, end) offsets.
    std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class PreTokenizer {
   public:
    void add_split(std::string_view pattern, bool literal, SplitBehavior behavior, bool invert);
    // ByteLevel(add_prefix_space, use_regex); the byte -> character mapping itself is left to
    // the BPE model, which works on raw bytes.
    void add_byte_level(bool add_prefix_space, bool use_regex);

    // Splits `text` (valid UTF-8) into non-empty pieces.
    std::vector<std::string> split(std::string_view text) const;

   private:
    struct SplitStep {
        Regex regex;
        SplitBehavior behavior;
        bool invert;
    };
    struct PrefixSpaceStep {};
    using Step = std::variant<SplitStep, PrefixSpaceStep>;

    static void apply(const SplitStep& step, std::string_view piece, std::vector<std::string>& out);

    std::vector<Step> steps_;
};

}  // namespace tracelm::tokenizer_detail
