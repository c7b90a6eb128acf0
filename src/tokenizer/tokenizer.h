// Tokenizers read from a Hugging Face tokenizer.json (byte-level BPE: Qwen3, GPT-2, Llama 3 and
// the like) or from a GGUF file's tokenizer.ggml.* metadata (byte-level BPE, or SentencePiece BPE;
// see gguf_vocab.h), plus a streaming detokenizer.
//
// Pipeline of encode(), as in the reference `tokenizers` library:
//   1. invalid UTF-8 in the input is replaced by U+FFFD (one per maximal invalid subpart, like
//      Python's errors="replace"), since the reference only accepts valid strings;
//   2. added tokens (<|im_start|>, <think>, ...) are cut out of the raw text, longest match
//      first, honouring lstrip/rstrip/single_word; those flagged `normalized` are matched in
//      the normalized text instead;
//   3. the remaining text is normalized (NFC for Qwen3) and split by the pre-tokenizer regex;
//   4. each piece is encoded by BPE over its bytes (the GPT-2 byte -> unicode alphabet).
// There is no post-processing (add_special_tokens = false): callers add BOS etc. themselves.
// A GGUF tokenizer follows llama.cpp instead: no normalization, control, unknown and user-defined
// tokens in the role of added tokens, and the pre-tokenizer regexes of tokenizer.ggml.pre. Those
// tokens are still matched leftmost-longest; llama.cpp cuts out the longest token everywhere
// first, which differs only where two such tokens overlap in the text.
//
// A Tokenizer is immutable after loading; copies share the tables and every method is safe to
// call from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tracelm {

class GgufFile;
struct GgufVocab;

class Tokenizer {
   public:
    // Loads tokenizer.json and, if present in the same directory, tokenizer_config.json
    // (eos/bos/pad tokens, chat template). Throws std::runtime_error naming the file and the
    // problem when a file is missing, malformed or uses an unsupported component.
    static Tokenizer from_file(const std::string& tokenizer_json_path);
    // The same from in-memory text; config_json_text is the tokenizer_config.json content, if
    // any.
    static Tokenizer from_json_text(const std::string& json_text,
                                    const std::string& config_json_text = "");

    // The tokenizer of a GGUF file (through read_gguf_vocab), or of vocabulary data in that form.
    // Throws std::runtime_error naming the file (for from_gguf) and the problem.
    static Tokenizer from_gguf(const GgufFile& file);
    static Tokenizer from_gguf_vocab(const GgufVocab& vocab);

    // parse_special = false leaves special tokens written in the text (such as "<|im_start|>") to
    // be tokenized as plain text; non-special added tokens (GGUF user-defined ones) are still
    // matched. This is llama.cpp's parse_special, and split_special_tokens in Hugging Face.
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
    // Concatenates the tokens' bytes and returns them as valid UTF-8 (invalid sequences become
    // U+FFFD). Ids that name no token are skipped; skip_special drops special added tokens. For a
    // SentencePiece tokenizer with a space prefix, the space that encode() put in front of the text
    // is dropped from a first token that starts with it.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

    // Raw bytes of one token (possibly a fragment of a UTF-8 character); for added tokens their
    // content. Empty for ids that name no token.
    std::string token_text(int32_t id) const;
    // 1 + the highest id, regular and added tokens together.
    int32_t vocab_size() const;
    // Id of an added token by its content (e.g. "<|im_end|>"), or of a regular token by its raw
    // bytes as token_text() returns them (e.g. " hello").
    std::optional<int32_t> token_id(std::string_view token_content) const;
    // Whether `id` is an added token flagged special (what decode's skip_special drops).
    bool is_special(int32_t id) const;

    // From tokenizer_config.json or the GGUF metadata; empty / nullopt / false when absent.
    std::optional<int32_t> eos_token_id() const;
    std::optional<int32_t> bos_token_id() const;
    std::optional<int32_t> pad_token_id() const;
    bool add_bos_token() const;
    const std::string& chat_template() const;

    // The tokens that end generation, ascending: EOS, a GGUF's EOT/EOM and fill-in-the-middle
    // pad/repo/separator ids, and the tokens llama.cpp recognizes by their text (<|im_end|>,
    // <|eot_id|>, <|endoftext|>, <|end_of_text|>, <end_of_turn>, ...).
    const std::vector<int32_t>& end_of_generation_ids() const;
    bool is_end_of_generation(int32_t id) const;

   private:
    struct Impl;
    explicit Tokenizer(std::shared_ptr<const Impl> impl);
    // json_name / config_name prefix error messages (file names or paths).
    static Tokenizer load(const std::string& json_text, const std::string& json_name,
                          const std::string& config_text, const std::string& config_name);
    std::shared_ptr<const Impl> impl_;
};

// Streaming detokenizer: feed ids one at a time and get back only complete UTF-8 text. Bytes of
// a character split across tokens are held back until the character is complete; a sequence
// that can no longer complete comes out as U+FFFD, exactly as decode() of all ids would give
// (except that a SentencePiece space prefix stays: streamed ids continue a prompt).
class StreamDecoder {
   public:
    explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);

    std::string push(int32_t id);
    // Returns what is still held back (an incomplete character becomes U+FFFD) and resets.
    std::string flush();

   private:
    Tokenizer tokenizer_;  // shares the tables, so the decoder may outlive the caller's copy
    bool skip_special_;
    std::string pending_;
};

}  // namespace tracelm
