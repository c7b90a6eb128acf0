// Parsing of tokenizer.json. The two large members, model.vocab (~150k entries) and model.merges
// (~150k pairs), are streamed from SAX events straight into flat vectors: building them as a
// generic JSON tree (std::map nodes, one array per merge) would cost several times the parse.
// Everything else is small and kept as an ordinary nlohmann::json tree.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tracelm::tokenizer_detail {

struct TokenizerJson {
    // The document without model.vocab / model.merges when those were streamed.
    nlohmann::json doc;
    // Present when model.vocab was an object (ids are checked to be in [0, INT32_MAX]).
    std::optional<std::vector<std::pair<std::string, int32_t>>> vocab;
    // Present when model.merges was an array; both the ["a", "b"] and the older "a b" element
    // forms are accepted.
    std::optional<std::vector<std::pair<std::string, std::string>>> merges;
};

// Throws std::runtime_error for invalid JSON or ill-typed vocab/merges entries.
TokenizerJson parse_tokenizer_json(std::string_view text);

}  // namespace tracelm::tokenizer_detail
