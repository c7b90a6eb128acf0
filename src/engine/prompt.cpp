#include "engine/prompt.h"

#include <algorithm>

namespace tracelm {

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text) {
    std::vector<int32_t> ids;
    if (tok.add_bos_token() && tok.bos_token_id()) ids.push_back(*tok.bos_token_id());
    const std::vector<int32_t> body = tok.encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
}

std::vector<int32_t> end_of_generation_ids(const Tokenizer& tok, const ModelConfig& config) {
    std::vector<int32_t> ids = tok.end_of_generation_ids();
    for (const int32_t id : config.eos_token_ids)
        if (!ends_generation(ids, id)) ids.push_back(id);
    return ids;
}

bool ends_generation(const std::vector<int32_t>& end_ids, int32_t id) {
    return std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end();
}

}  // namespace tracelm
