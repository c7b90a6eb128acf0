// Gemma 3's tokenizer.json as transformers builds it from the GGUF (scripts/make_hf_gemma3_tokenizer_goldens.py).
// The file is 33 MB, so the repository keeps its small parts (testdata/tokenizer/gemma3_tokenizer_json_recipe.json:
// everything but the vocabulary, the merges and the added tokens) and this rebuilds the rest from the GGUF's
// tokens by transformers' rules (transformers/integrations/gguf/gguf_tokenizer_mapping.py: gemma_tokenizer,
// generate_merges, add_gguf_special_tokens). The rebuilt parts' SHA-256, taken as the script takes them, must equal
// the ones the script recorded of transformers' own file: only then is the rebuilt file the one Hugging Face's
// goldens were made with.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "checkpoint/model_cache.h"
#include "tokenizer/gguf_vocab.h"

namespace tracelm::testing {

struct RebuiltTokenizerJson {
    std::string text;                           // the tokenizer.json
    std::map<std::string, std::string> sha256;  // of "vocab", "merges", "added_tokens"
};

namespace gemma3_detail {

// Python's str.isspace() for one code point.
inline bool python_isspace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Offsets where the UTF-8 characters of `s` begin, and s.size().
inline std::vector<size_t> char_starts(std::string_view s) {
    std::vector<size_t> starts;
    for (size_t i = 0; i < s.size(); ++i) {
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
    }
    starts.push_back(s.size());
    return starts;
}

inline char32_t decode_char(std::string_view s) {
    const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(s[i])); };
    if (s.size() == 1) return b(0);
    if (s.size() == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    if (s.size() == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

// gemma_tokenizer: a token of whitespace holding a space is spelled as that many "▁".
inline std::string respell(const std::string& token) {
    const std::vector<size_t> starts = char_starts(token);
    bool all_space = token.find(' ') != std::string::npos;
    for (size_t i = 0; all_space && i + 1 < starts.size(); ++i) {
        all_space = python_isspace(decode_char(std::string_view(token).substr(starts[i], starts[i + 1] - starts[i])));
    }
    if (!all_space) return token;
    std::string out;
    for (size_t i = 0; i + 1 < starts.size(); ++i) out += "\xE2\x96\x81";
    return out;
}

}  // namespace gemma3_detail

inline RebuiltTokenizerJson rebuild_gemma3_tokenizer_json(const GgufVocab& v, const nlohmann::json& recipe) {
    using nlohmann::json;
    std::vector<std::string> tokens;
    tokens.reserve(v.tokens.size());
    for (const std::string& t : v.tokens) tokens.push_back(gemma3_detail::respell(t));
    std::unordered_map<std::string_view, int32_t> vocab;
    for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = static_cast<int32_t>(i);

    json doc = recipe.at("skeleton");
    json& vocab_json = doc["model"]["vocab"] = json::object();
    json& merges_json = doc["model"]["merges"] = json::array();
    json& added_json = doc["added_tokens"] = json::array();
    Sha256 vocab_sha, merges_sha, added_sha;
    const auto put = [](Sha256& sha, std::string_view s) {
        sha.update(s);
        sha.update(std::string_view("\0", 1));
    };
    // generate_merges with scores -id: the tokens in file order, each split with the longest left part first.
    for (size_t id = 0; id < tokens.size(); ++id) {
        const std::string& t = tokens[id];
        vocab_json[t] = id;
        put(vocab_sha, t);
        const std::vector<size_t> starts = gemma3_detail::char_starts(t);
        for (size_t k = starts.size() - 1; k-- > 1;) {  // left = the first k characters
            const std::string_view left = std::string_view(t).substr(0, starts[k]);
            const std::string_view right = std::string_view(t).substr(starts[k]);
            if (!vocab.contains(left) || !vocab.contains(right)) continue;
            merges_json.push_back({left, right});
            put(merges_sha, left);
            put(merges_sha, right);
        }
    }
    // add_gguf_special_tokens: control tokens as special added tokens, user-defined ones found in the (respelled)
    // vocabulary as plain ones; none normalized.
    for (size_t id = 0; id < v.tokens.size(); ++id) {
        const GgufTokenType type = v.types.empty() ? GgufTokenType::Normal : v.types[id];
        const bool special = type == GgufTokenType::Control;
        if (!special && !(type == GgufTokenType::UserDefined && vocab.contains(v.tokens[id]))) continue;
        added_json.push_back({{"id", id}, {"content", v.tokens[id]}, {"single_word", false}, {"lstrip", false},
                              {"rstrip", false}, {"normalized", false}, {"special", special}});
        put(added_sha, std::to_string(id));
        put(added_sha, v.tokens[id]);
        put(added_sha, special ? "10000" : "00000");  // special, normalized, lstrip, rstrip, single_word
    }
    return {doc.dump(), {{"vocab", vocab_sha.hex()}, {"merges", merges_sha.hex()}, {"added_tokens", added_sha.hex()}}};
}

}  // namespace tracelm::testing
