// Incremental detokenization for streamed answers with stop strings. Text comes out only as complete UTF-8
// characters (StreamDecoder); a tail that could be the start of a stop string is held back until it is known not
// to be one; at the first stop string the text ends before it and nothing after it is sent. The concatenation of
// what push() and finish() return is the whole answer, so a streamed and a non-streamed answer are the same bytes.
//
// A stop string is looked for in all the text so far after every token (as vLLM does): when one token completes
// several, the one that starts first wins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tracelm::serve {

class TextStream {
   public:
    // Stop strings must be non-empty. Special tokens (e.g. an end-of-turn token generated with ignore_eos) are
    // not text and are skipped, as in vLLM's default, except those in `keep_special` (the markers a tool call
    // parser reads, such as Mistral's [TOOL_CALLS]).
    TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, std::vector<int32_t> keep_special = {});

    // The text that can be sent after token `id`; empty once stopped().
    std::string push(int32_t id);
    // At the end of generation: what was held back (an incomplete character becomes U+FFFD).
    std::string finish();
    // A stop string was seen: the caller ends the request (finish reason "stop").
    bool stopped() const { return stopped_; }
    // Unicode characters the tokens decoded to so far (before any cut at a stop string): a token's text offset.
    size_t decoded_chars() const { return decoded_chars_; }

   private:
    std::string release(bool at_end);

    Tokenizer tokenizer_;  // shares the tables
    StreamDecoder decoder_;
    std::vector<std::string> stop_;
    std::vector<int32_t> keep_special_;
    std::string pending_;  // decoded but not yet sent
    bool stopped_ = false;
    size_t decoded_chars_ = 0;
};

}  // namespace tracelm::serve
