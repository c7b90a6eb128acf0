#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <unordered_map>

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
    // The older prefix/suffix/middle keys, where the file has no fim_* key, as llama.cpp reads them.
    v.fim_pre_id = token_id(file, "tokenizer.ggml.fim_pre_token_id", n);
    if (!v.fim_pre_id) v.fim_pre_id = token_id(file, "tokenizer.ggml.prefix_token_id", n);
    v.fim_suf_id = token_id(file, "tokenizer.ggml.fim_suf_token_id", n);
    if (!v.fim_suf_id) v.fim_suf_id = token_id(file, "tokenizer.ggml.suffix_token_id", n);
    v.fim_mid_id = token_id(file, "tokenizer.ggml.fim_mid_token_id", n);
    if (!v.fim_mid_id) v.fim_mid_id = token_id(file, "tokenizer.ggml.middle_token_id", n);
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

namespace {

// llama.cpp's end-of-generation texts (llama-vocab.cpp, load).
constexpr std::string_view kEndOfGeneration[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
};

// The fill-in-the-middle markers it looks for by text, per role, where the file names no id for the role.
struct FimTexts {
    std::optional<int32_t> GgufVocab::*key;
    bool ends_generation;
    std::vector<std::string_view> texts;
};
const std::vector<FimTexts>& fim_texts() {
    static const std::vector<FimTexts> table = {
        {&GgufVocab::fim_pre_id, false,
         {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
          "<|prefix|>"}},
        {&GgufVocab::fim_suf_id, false,
         {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
          "<|suffix|>"}},
        {&GgufVocab::fim_mid_id, false,
         {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
          "<|middle|>"}},
        {&GgufVocab::fim_pad_id, true, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
        {&GgufVocab::fim_rep_id, true, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
        {&GgufVocab::fim_sep_id, true, {"<|file_sep|>"}},
    };
    return table;
}

// gpt-oss tokens that llama.cpp always renders, as user-defined tokens.
constexpr std::string_view kGptOssUserDefined[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

// What a token's text makes of it in llama.cpp; every token is looked up once.
struct TextRole {
    int fim = -1;  // index into fim_texts()
    bool ends_generation = false;
    bool user_defined = false;
};
const std::unordered_map<std::string_view, TextRole>& text_roles() {
    static const auto table = [] {
        std::unordered_map<std::string_view, TextRole> t;
        for (size_t r = 0; r < fim_texts().size(); ++r) {
            for (std::string_view text : fim_texts()[r].texts) t[text].fim = static_cast<int>(r);
        }
        for (std::string_view text : kEndOfGeneration) t[text].ends_generation = true;
        for (std::string_view text : kGptOssUserDefined) t[text].user_defined = true;
        return t;
    }();
    return table;
}

}  // namespace

std::span<const std::string_view> end_of_generation_texts() {
    static const std::vector<std::string_view> texts = [] {
        std::vector<std::string_view> t(std::begin(kEndOfGeneration), std::end(kEndOfGeneration));
        for (const FimTexts& role : fim_texts()) {
            if (role.ends_generation) t.insert(t.end(), role.texts.begin(), role.texts.end());
        }
        return t;
    }();
    return texts;
}

GgufTokenRoles gguf_token_roles(const GgufVocab& v, std::optional<int32_t> eos_id) {
    const size_t n = v.tokens.size();
    GgufTokenRoles roles;
    roles.types = v.types.empty() ? std::vector<GgufTokenType>(n, GgufTokenType::Normal) : v.types;
    std::set<int32_t> eog;
    const auto add = [&](std::optional<int32_t> id) {
        if (id && *id >= 0 && static_cast<size_t>(*id) < n) eog.insert(*id);
    };
    // A role's metadata id, else the lowest id with one of its texts (llama.cpp takes one in hash-map order).
    std::vector<std::optional<int32_t>> fim(fim_texts().size());
    for (size_t r = 0; r < fim.size(); ++r) fim[r] = v.*fim_texts()[r].key;
    for (size_t i = 0; i < n; ++i) {
        const auto it = text_roles().find(v.tokens[i]);
        if (it == text_roles().end()) continue;
        const TextRole& role = it->second;
        const auto id = static_cast<int32_t>(i);
        if (role.fim >= 0 && !fim[static_cast<size_t>(role.fim)]) {
            fim[static_cast<size_t>(role.fim)] = id;
            roles.types[i] = GgufTokenType::Control;
        }
        if (role.ends_generation) {
            add(id);
            roles.types[i] = GgufTokenType::Control;
        }
        if (role.user_defined) roles.types[i] = GgufTokenType::UserDefined;
    }
    for (size_t r = 0; r < fim.size(); ++r) {
        if (fim_texts()[r].ends_generation) add(fim[r]);
    }
    for (const auto& id : {eos_id, v.eot_id, v.eom_id}) add(id);
    // gpt-oss and solar-open end turns with <|return|>/<|call|> or <|calls|>/<|flush|>, not <|end|>; Gemma 4 and
    // PLaMo have a normal </s>.
    const auto eog_text = [&](std::initializer_list<std::string_view> texts) -> std::optional<int32_t> {
        for (int32_t id : eog) {
            const std::string& text = v.tokens[static_cast<size_t>(id)];
            if (std::find(texts.begin(), texts.end(), text) != texts.end()) return id;
        }
        return std::nullopt;
    };
    const auto end = eog_text({"<|end|>"});
    const bool call = eog_text({"<|call|>", "<|calls|>"}).has_value();
    if (end && call && (eog_text({"<|return|>"}) || eog_text({"<|flush|>"}))) {
        eog.erase(*end);
        roles.types[static_cast<size_t>(*end)] = GgufTokenType::UserDefined;
    }
    const auto s = eog_text({"</s>"});
    if (s && eog_text({"<|tool_response>", "<|plamo:eos|>"})) {
        eog.erase(*s);
        roles.types[static_cast<size_t>(*s)] = GgufTokenType::Normal;
    }
    roles.eog_ids.assign(eog.begin(), eog.end());
    return roles;
}

}  // namespace tokenizer_detail

}  // namespace tracelm
