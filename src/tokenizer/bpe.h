// The BPE model of a tokenizer.json (or a GGUF "gpt2" vocabulary): turns one pre-tokenized piece into ids by
// applying merges in rank order. A byte-level model starts from one symbol per byte (the GPT-2 byte alphabet); a
// SentencePiece-style one (Gemma, Llama 2) from one symbol per character, a character without a token falling
// back to its bytes' <0xXX> tokens (byte_fallback) or the unknown token. Symbols live in an index-linked list and
// candidate merges in a min-heap keyed by (rank, position), so a piece of n symbols costs O(n log n) rather than
// the O(n^2) of rescanning for the best pair after every merge.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/flat_hash_map.h"

namespace tracelm::tokenizer_detail {

struct BpeConfig {
    bool byte_level = true;
    std::vector<std::pair<std::string, int32_t>> vocab;       // token text -> id
    std::vector<std::pair<std::string, std::string>> merges;  // token texts, rank order
    std::optional<std::string> unk_token;
    bool fuse_unk = false;
    bool byte_fallback = false;
    bool ignore_merges = false;
};

// Reusable buffers for BpeModel::encode_word, so one encode() call allocates them once.
struct BpeScratch {
    struct Symbol {
        int32_t id;
        int32_t prev;  // index into symbols, -1 at the start
        int32_t next;  // index into symbols, -1 at the end
        bool alive;
    };
    struct Candidate {
        int32_t rank;
        int32_t pos;  // index of the left symbol
        int32_t new_id;
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
};

class BpeModel {
   public:
    // Throws std::runtime_error when a merge names a token (or yields one) missing from vocab.
    explicit BpeModel(BpeConfig config);
    // The lookup table views the strings of vocab_: moving keeps them in place, copying would not.
    BpeModel(const BpeModel&) = delete;
    BpeModel& operator=(const BpeModel&) = delete;
    BpeModel(BpeModel&&) noexcept = default;
    BpeModel& operator=(BpeModel&&) noexcept = default;

    // Appends the ids of one piece (valid UTF-8 unless byte-level) to `out`.
    void encode_word(std::string_view piece, BpeScratch& scratch, std::vector<int32_t>& out) const;

    // Looks a regular token up by its raw bytes (byte-level) or its text.
    std::optional<int32_t> find_token(std::string_view raw_bytes) const;

    bool byte_level() const { return byte_level_; }
    // (text, id) of every regular token.
    const std::vector<std::pair<std::string, int32_t>>& vocab() const { return vocab_; }

   private:
    struct Merge {
        int32_t rank;
        int32_t new_id;
    };
    const Merge* find_merge(int32_t left, int32_t right) const;
    // The first symbols of `piece`, before any merge.
    void initial_symbols(std::string_view piece, std::vector<BpeScratch::Symbol>& symbols) const;

    struct StringHash {
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::vector<std::pair<std::string, int32_t>> vocab_;
    FlatHashMap<std::string_view, int32_t, StringHash, std::equal_to<>> text_to_id_;
    FlatHashMap<uint64_t, Merge, std::hash<uint64_t>, std::equal_to<>> merges_;
    std::array<int32_t, 256> byte_ids_{};  // -1: the byte has no token of its own (nor <0xXX> with byte_fallback)
    std::optional<int32_t> unk_id_;
    bool byte_level_ = true;
    bool fuse_unk_ = false;
    bool ignore_merges_ = false;
};

}  // namespace tracelm::tokenizer_detail
