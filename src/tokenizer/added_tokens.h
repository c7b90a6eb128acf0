// Added tokens (special tokens such as <|im_end|>, and extra ones such as <think>): found in the
// text before normalization and pre-tokenization and emitted as single ids. Matching is
// leftmost-longest and non-overlapping, like the Aho-Corasick LeftmostLongest search of the
// reference implementation, and honours the lstrip/rstrip/single_word flags.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tracelm::tokenizer_detail {

struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool single_word = false;  // only match when not inside a word
    bool lstrip = false;       // absorb whitespace on the left into the token
    bool rstrip = false;       // absorb whitespace on the right into the token
    bool normalized = false;   // match in the normalized text rather than the raw input
    bool special = false;      // skipped by decode(skip_special = true)
};

class AddedTokenMatcher {
   public:
    AddedTokenMatcher() = default;
    // `tokens` are matched by their `content`; empty contents are ignored.
    explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

    struct Segment {
        std::string_view text;  // views into the text given to split()
        int32_t id;             // the added token's id, or -1 for plain text
    };
    // Cuts `text` (valid UTF-8) into plain-text segments and added tokens, in order. With
    // include_special = false, tokens flagged special are not matched (they stay plain text).
    std::vector<Segment> split(std::string_view text, bool include_special = true) const;

   private:
    struct Node {
        std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node index
        int32_t token = -1;                                       // index into tokens_
    };
    // Returns (token index, length) of the longest token starting at `pos`, or (-1, 0).
    std::pair<int32_t, size_t> longest_match(std::string_view text, size_t pos,
                                             bool include_special) const;

    std::vector<AddedToken> tokens_;
    std::vector<Node> nodes_;         // nodes_[0] is the root
    std::array<bool, 256> starts_{};  // bytes that can begin some token
};

}  // namespace tracelm::tokenizer_detail
