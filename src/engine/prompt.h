// A text prompt's ids and the ids that end generation, for every front end (the CLI, the chat session, the server):
// one rule, written once. Token ids are checked against the model by Engine::check_prompt, and only there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace tracelm {

// BOS first when the tokenizer asks for it (add_bos_token), then the text's ids.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text);
// The tokenizer's end-of-generation ids, then the model's EOS ids that are not among them.
std::vector<int32_t> end_of_generation_ids(const Tokenizer& tok, const ModelConfig& config);
bool ends_generation(const std::vector<int32_t>& end_ids, int32_t id);

}  // namespace tracelm
