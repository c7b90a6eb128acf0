#include "tokenizer/gguf_vocab.h"

#include <stdexcept>

#include "formats/gguf.h"

namespace tracelm {

namespace {

std::optional<int32_t> token_id(const GgufFile& file, std::string_view key, size_t n_tokens) {
    const auto id = file.opt_int<int32_t>(key);
    // llama.cpp ignores an id outside the vocabulary (with a warning) rather than failing the load.
    if (!id || *id < 0 || static_cast<size_t>(*id) >= n_tokens) return std::nullopt;
    return id;
}

std::vector<std::string> to_strings(const std::vector<std::string_view>& views) {
    return {views.begin(), views.end()};
}

}  // namespace

GgufVocab read_gguf_vocab(const GgufFile& file) {
    GgufVocab v;
    v.model = file.get_string("tokenizer.ggml.model");
    v.pre = file.opt_string("tokenizer.ggml.pre").value_or("");
    v.tokens = to_strings(file.get_string_array("tokenizer.ggml.tokens"));
    const size_t n = v.tokens.size();
    if (file.find("tokenizer.ggml.token_type") != nullptr) {
        for (int32_t t : file.get_i32_array("tokenizer.ggml.token_type")) {
            // Values outside the enumeration count as undefined, as in llama.cpp.
            v.types.push_back(t >= 0 && t <= static_cast<int32_t>(GgufTokenType::Byte)
                                  ? static_cast<GgufTokenType>(t)
                                  : GgufTokenType::Undefined);
        }
    }
    if (file.find("tokenizer.ggml.scores") != nullptr) {
        v.scores = file.get_f32_array("tokenizer.ggml.scores");
    }
    if (file.find("tokenizer.ggml.merges") != nullptr) {
        v.merges = to_strings(file.get_string_array("tokenizer.ggml.merges"));
    }
    v.bos_id = token_id(file, "tokenizer.ggml.bos_token_id", n);
    v.eos_id = token_id(file, "tokenizer.ggml.eos_token_id", n);
    v.unk_id = token_id(file, "tokenizer.ggml.unknown_token_id", n);
    v.pad_id = token_id(file, "tokenizer.ggml.padding_token_id", n);
    v.eot_id = token_id(file, "tokenizer.ggml.eot_token_id", n);
    v.eom_id = token_id(file, "tokenizer.ggml.eom_token_id", n);
    v.fim_pad_id = token_id(file, "tokenizer.ggml.fim_pad_token_id", n);
    v.fim_rep_id = token_id(file, "tokenizer.ggml.fim_rep_token_id", n);
    v.fim_sep_id = token_id(file, "tokenizer.ggml.fim_sep_token_id", n);
    v.add_bos = file.opt_bool("tokenizer.ggml.add_bos_token");
    v.add_space_prefix = file.opt_bool("tokenizer.ggml.add_space_prefix");
    v.chat_template = file.opt_string("tokenizer.chat_template").value_or("");
    return v;
}

namespace tokenizer_detail {

namespace {

// The GPT-2 pattern, which several pre-tokenizers reuse.
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama 3 and Qwen2 differ in the digit runs: up to three digits, or one. The contractions are
// spelled out rather than (?i:...), under which PCRE2 would also fold U+017F to 's' and U+212A to
// 'k', which llama.cpp does not.
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Entry {
    std::vector<std::string_view> names;
    GgufPreTokenizer spec;
};

// llama.cpp's names for each supported pre-tokenizer and the regexes it uses for them.
const std::vector<Entry>& entries() {
    static const std::vector<Entry> table = {
        {{"default", ""},
         {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false, false}},
        {{"llama3", "llama-v3", "llama-bpe"}, {{kLlama3}, true, true}},
        {{"qwen2", "deepseek-r1-qwen"}, {{kQwen2}, false, false}},
        // SmolLM and the StarCoder family: every digit on its own, then GPT-2.
        {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
         {{R"(\p{N})", kGpt2}, false, false}},
        {{"gpt-2", "phi-2", "mpt", "olmo"}, {{kGpt2}, false, false}},
    };
    return table;
}

}  // namespace

const GgufPreTokenizer& gguf_pre_tokenizer(std::string_view name) {
    std::string known;
    for (const Entry& e : entries()) {
        for (std::string_view n : e.names) {
            if (n == name) return e.spec;
            if (!n.empty()) known += (known.empty() ? "" : ", ") + std::string(n);
        }
    }
    throw std::runtime_error("tokenizer.ggml.pre \"" + std::string(name) +
                             "\" is not a supported pre-tokenizer (supported: " + known + ")");
}

}  // namespace tokenizer_detail

}  // namespace tracelm
