// SentencePiece BPE (the "llama" tokenizer model of GGUF files): spaces become "▁", the text starts
// as one symbol per UTF-8 character, and adjacent symbols are merged while their concatenation is a
// piece, the pair whose piece has the highest score first (the leftmost among equal scores). A
// symbol left without a piece of its own comes out as its bytes' <0xXX> tokens, or the unknown
// token where the vocabulary has no byte tokens.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/flat_hash_map.h"

namespace tracelm::tokenizer_detail {

inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, "▁"

// Spaces to "▁" and back.
std::string spm_escape(std::string_view text);
std::string spm_unescape(std::string_view piece);

struct SpmPiece {
    std::string text;  // with "▁" for spaces
    float score = 0.0f;
    int32_t id = 0;
};

class SpmModel {
   public:
    // `pieces`: the tokens that text may merge into (of equal texts, the last counts); byte_ids[b]:
    // the <0xXX> token of byte b, or -1.
    SpmModel(std::vector<SpmPiece> pieces, const std::array<int32_t, 256>& byte_ids,
             std::optional<int32_t> unk_id);
    SpmModel(const SpmModel&) = delete;  // the lookup table views the strings of pieces_
    SpmModel& operator=(const SpmModel&) = delete;
    SpmModel(SpmModel&&) noexcept = default;
    SpmModel& operator=(SpmModel&&) noexcept = default;

    // Appends the ids of `text` (valid UTF-8, spaces not yet escaped), with a space in front when
    // `space_prefix`.
    void encode(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;

    // The piece whose text, spaces unescaped, is `raw_text`.
    std::optional<int32_t> find_token(std::string_view raw_text) const;

   private:
    struct StringHash {
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    const SpmPiece* find(std::string_view text) const;

    std::vector<SpmPiece> pieces_;
    // Piece text -> index into pieces_.
    FlatHashMap<std::string_view, int32_t, StringHash, std::equal_to<>> index_;
    std::array<int32_t, 256> byte_ids_;
    std::optional<int32_t> unk_id_;
};

}  // namespace tracelm::tokenizer_detail
