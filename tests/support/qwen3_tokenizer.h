// The real Qwen3 tokenizer vendored in models/qwen3-tokenizer, loaded once per test process.
#pragma once

#include "tokenizer/tokenizer.h"

namespace tracelm::testing {

inline const Tokenizer& qwen3_tokenizer() {
    static const Tokenizer tok = Tokenizer::from_file(TRACELM_SOURCE_DIR "/models/qwen3-tokenizer/tokenizer.json");
    return tok;
}

}  // namespace tracelm::testing
