// Golden files of tokenizations ({"text", "special", "ids"} per JSON line, from llama.cpp or Hugging Face
// `tokenizers`) and the check of a tokenizer against them.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tracelm::testing {

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) {
        if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
    }
    return lines;
}

inline nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(in);
}

// Encodes every golden line with `tokenizer_for(line)` and reports the mismatches (the first ten in full).
template <typename TokenizerFor>
void expect_goldens(const std::vector<nlohmann::json>& lines, TokenizerFor tokenizer_for) {
    ASSERT_FALSE(lines.empty());
    int failures = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
        const nlohmann::json& line = lines[i];
        const std::string text = line.at("text").get<std::string>();
        const bool special = line.at("special").get<bool>();
        const auto expected = line.at("ids").get<std::vector<int32_t>>();
        const auto ids = tokenizer_for(line).encode(text, special);
        if (ids != expected && ++failures <= 10) {
            ADD_FAILURE() << "line " << i + 1 << " " << nlohmann::json(text).dump() << " special=" << special
                          << "\n  expected " << nlohmann::json(expected).dump()
                          << "\n  got      " << nlohmann::json(ids).dump();
        }
    }
    EXPECT_EQ(failures, 0) << "of " << lines.size() << " lines";
}

// The vocabulary facts llama.cpp reports (make_llamacpp_goldens.py's *_vocab.json): size, BOS, EOS, add_bos and
// the end-of-generation ids.
inline void expect_vocab_facts(const Tokenizer& tok, const nlohmann::json& facts) {
    EXPECT_EQ(tok.vocab_size(), facts.at("n_vocab").get<int32_t>());
    EXPECT_EQ(tok.bos_token_id(), facts.at("bos_id").get<int32_t>());
    EXPECT_EQ(tok.eos_token_id(), facts.at("eos_id").get<int32_t>());
    EXPECT_EQ(tok.add_bos_token(), facts.at("add_bos").get<bool>());
    EXPECT_EQ(tok.end_of_generation_ids(), facts.at("eog_ids").get<std::vector<int32_t>>());
}

// decode(encode(text)) gives the text back, and streaming the golden ids gives decode()'s text.
inline void expect_round_trips(const Tokenizer& tok, const std::vector<nlohmann::json>& lines) {
    for (const nlohmann::json& line : lines) {
        const std::string text = line.at("text").get<std::string>();
        EXPECT_EQ(tok.decode(tok.encode(text, line.at("special").get<bool>())), text) << nlohmann::json(text).dump();
        const auto ids = line.at("ids").get<std::vector<int32_t>>();
        StreamDecoder stream(tok);
        std::string streamed;
        for (int32_t id : ids) streamed += stream.push(id);
        streamed += stream.flush();
        EXPECT_EQ(streamed, tok.decode(ids)) << nlohmann::json(text).dump();
    }
}

}  // namespace tracelm::testing
