// The tokenizer as a GGUF file describes it (the tokenizer.ggml.* metadata keys), read into plain
// data that Tokenizer::from_gguf_vocab builds a tokenizer from. Two models are supported:
//   "gpt2"  byte-level BPE: tokens in the GPT-2 byte alphabet, merges "left right" in rank order, and
//           the pre-tokenizer regexes named by tokenizer.ggml.pre;
//   "llama" SentencePiece BPE: pieces with scores ("▁" for a space), byte-fallback tokens <0xXX>.
// Token types (tokenizer.ggml.token_type) follow llama.cpp's numbering; control, unknown and
// user-defined tokens are the ones matched in the text before BPE, like added tokens in
// tokenizer.json (control and unknown ones only when special tokens are parsed).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tracelm {

class GgufFile;

enum class GgufTokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

struct GgufVocab {
    std::string model;                 // tokenizer.ggml.model: "gpt2" or "llama"
    std::string pre;                   // tokenizer.ggml.pre ("gpt2" only; empty means "default")
    std::vector<std::string> tokens;   // by id
    std::vector<GgufTokenType> types;  // by id; empty: every token is Normal
    std::vector<float> scores;         // by id ("llama" only; empty: all 0)
    std::vector<std::string> merges;   // "gpt2" only: "left right", best rank first
    std::optional<int32_t> bos_id, eos_id, unk_id, pad_id, eot_id, eom_id;
    // Fill-in-the-middle tokens: prefix, suffix, middle, and pad, repository, file separator (which llama.cpp also
    // treats as ending generation).
    std::optional<int32_t> fim_pre_id, fim_suf_id, fim_mid_id, fim_pad_id, fim_rep_id, fim_sep_id;
    std::optional<bool> add_bos;           // absent: the model's default (see tokenizer.cpp)
    std::optional<bool> add_space_prefix;  // "llama" only; absent: true
    std::string chat_template;             // tokenizer.chat_template
};

// Reads the tokenizer.ggml.* keys and tokenizer.chat_template. Throws std::runtime_error naming the
// file and the key when a required one is missing or a key is ill-typed; ids outside the vocabulary
// are dropped, as llama.cpp does. Consistency (array lengths, merges) is checked by
// Tokenizer::from_gguf_vocab.
GgufVocab read_gguf_vocab(const GgufFile& file);

namespace tokenizer_detail {

// What a tokenizer.ggml.pre name stands for in llama.cpp: the regexes applied one after the other
// (each splits the pieces the previous left, keeping matches and the text between them as pieces),
// whether a piece that is a token by itself skips the merges, and the default of add_bos.
struct GgufPreTokenizer {
    std::vector<std::string_view> regexes;
    bool ignore_merges = false;
    bool add_bos = false;
};
// Throws std::runtime_error listing the supported names for an unknown one.
const GgufPreTokenizer& gguf_pre_tokenizer(std::string_view name);

// The texts of the tokens llama.cpp ends generation on, whatever their type: end-of-turn texts and those of
// fill-in-the-middle pad, repository and file-separator tokens.
std::span<const std::string_view> end_of_generation_texts();

// The token types as llama.cpp (0.3.36) uses them, and its end-of-generation tokens: tokens it recognises by their
// text as ending generation or as fill-in-the-middle markers count as control tokens (so parse_special = false
// leaves them to the text), four gpt-oss tokens as user-defined; EOS, EOT, EOM and the fill-in-the-middle pad,
// repository and separator tokens end generation. `eos_id` is the EOS after the model's default; vocab.types is
// empty or has one entry per token.
struct GgufTokenRoles {
    std::vector<GgufTokenType> types;  // by id
    std::vector<int32_t> eog_ids;      // ascending
};
GgufTokenRoles gguf_token_roles(const GgufVocab& vocab, std::optional<int32_t> eos_id);

}  // namespace tokenizer_detail

}  // namespace tracelm
