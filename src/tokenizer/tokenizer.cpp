#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "formats/gguf.h"
#include "runtime/untrusted.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace tracelm {

using namespace tokenizer_detail;

namespace {

using nlohmann::json;

// Typed, checked access to the members of one JSON object; errors name the member's path.
class Fields {
   public:
    Fields(const json& object, std::string path) : object_(object), path_(std::move(path)) {
        if (!object_.is_object()) {
            throw std::runtime_error((path_.empty() ? "the document" : path_) +
                                     " must be a JSON object");
        }
    }

    std::string where(std::string_view key) const {
        return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
    }
    [[noreturn]] void fail(std::string_view key, const std::string& problem) const {
        throw std::runtime_error(where(key) + " " + problem);
    }

    // nullptr when the member is absent or null.
    const json* get(const char* key) const {
        const auto it = object_.find(key);
        return it == object_.end() || it->is_null() ? nullptr : &*it;
    }
    Fields object(const char* key) const {
        const json* v = get(key);
        if (v == nullptr) fail(key, "is missing");
        return Fields(*v, where(key));
    }
    const json& array(const char* key) const {
        const json* v = get(key);
        if (v == nullptr || !v->is_array()) fail(key, "must be an array");
        return *v;
    }
    std::optional<std::string> optional_string(const char* key) const {
        const json* v = get(key);
        if (v == nullptr) return std::nullopt;
        if (!v->is_string()) fail(key, "must be a string");
        return v->get<std::string>();
    }
    std::string string(const char* key) const {
        auto v = optional_string(key);
        if (!v) fail(key, "is missing");
        return std::move(*v);
    }
    bool boolean(const char* key, bool fallback) const {
        const json* v = get(key);
        if (v == nullptr) return fallback;
        if (!v->is_boolean()) fail(key, "must be true or false");
        return v->get<bool>();
    }
    int32_t id(const char* key) const {
        const json* v = get(key);
        if (v == nullptr || !v->is_number_unsigned() ||
            v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
            fail(key, "must be a token id (an integer in [0, 2^31))");
        }
        return static_cast<int32_t>(v->get<uint64_t>());
    }

   private:
    const json& object_;
    std::string path_;
};

std::string element_path(const std::string& array_path, size_t index) {
    return array_path + "[" + std::to_string(index) + "]";
}

void read_normalizers(const Fields& n, std::vector<NormalForm>& forms) {
    const std::string type = n.string("type");
    if (type == "NFC") {
        forms.push_back(NormalForm::NFC);
    } else if (type == "NFD") {
        forms.push_back(NormalForm::NFD);
    } else if (type == "NFKC") {
        forms.push_back(NormalForm::NFKC);
    } else if (type == "NFKD") {
        forms.push_back(NormalForm::NFKD);
    } else if (type == "Sequence") {
        const json& list = n.array("normalizers");
        for (size_t i = 0; i < list.size(); ++i) {
            read_normalizers(Fields(list[i], element_path(n.where("normalizers"), i)), forms);
        }
    } else {
        n.fail("type",
               "\"" + untrusted::escape(type) + "\" is not a supported normalizer (NFC, NFD, NFKC, NFKD, Sequence)");
    }
}

// A chain of normalization forms equals one form: compatibility if any step is, composed or decomposed as
// the last step is (each form's result depends only on the text's equivalence class, and compatibility
// equivalence is coarser than canonical). So a file listing 100,000 steps costs one pass per text.
std::optional<NormalForm> read_normalizer(const Fields& n) {
    std::vector<NormalForm> forms;
    read_normalizers(n, forms);
    if (forms.empty()) return std::nullopt;
    const bool compat = std::any_of(forms.begin(), forms.end(),
                                    [](NormalForm f) { return f == NormalForm::NFKC || f == NormalForm::NFKD; });
    const bool composed = forms.back() == NormalForm::NFC || forms.back() == NormalForm::NFKC;
    if (compat) return composed ? NormalForm::NFKC : NormalForm::NFKD;
    return composed ? NormalForm::NFC : NormalForm::NFD;
}

SplitBehavior read_split_behavior(const Fields& split) {
    const std::string name = split.string("behavior");
    if (name == "Removed") return SplitBehavior::Removed;
    if (name == "Isolated") return SplitBehavior::Isolated;
    if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
    if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
    if (name == "Contiguous") return SplitBehavior::Contiguous;
    split.fail("behavior", "\"" + untrusted::escape(name) + "\" is not a known split behavior");
}

// `byte_level_seen` enforces that ByteLevel comes last: the model takes the byte mapping over,
// so no step may look at the mapped text.
void read_pre_tokenizer(const Fields& p, PreTokenizer& out, bool& byte_level_seen) {
    const std::string type = p.string("type");
    if (type == "Sequence") {
        const json& list = p.array("pretokenizers");
        for (size_t i = 0; i < list.size(); ++i) {
            read_pre_tokenizer(Fields(list[i], element_path(p.where("pretokenizers"), i)), out,
                               byte_level_seen);
        }
        return;
    }
    if (byte_level_seen) p.fail("type", "\"" + untrusted::escape(type) + "\" after ByteLevel is not supported");
    if (type == "Split") {
        const Fields pattern = p.object("pattern");
        const auto regex = pattern.optional_string("Regex");
        const auto literal = pattern.optional_string("String");
        if (regex.has_value() == literal.has_value()) {
            p.fail("pattern", "must have exactly one of \"Regex\" and \"String\"");
        }
        out.add_split(regex ? *regex : *literal, literal.has_value(), read_split_behavior(p),
                      p.boolean("invert", false));
    } else if (type == "ByteLevel") {
        out.add_byte_level(p.boolean("add_prefix_space", true), p.boolean("use_regex", true));
        byte_level_seen = true;
    } else {
        p.fail("type",
               "\"" + untrusted::escape(type) + "\" is not a supported pre-tokenizer (Split, ByteLevel, Sequence)");
    }
}

BpeConfig read_bpe_config(TokenizerJson& tj) {
    const Fields root(tj.doc, "");
    const Fields model = root.object("model");
    if (const auto type = model.optional_string("type"); type && *type != "BPE") {
        model.fail("type", "\"" + untrusted::escape(*type) + "\" is not supported (only byte-level BPE is)");
    }
    if (!tj.vocab) {
        model.fail("vocab", model.get("vocab") ? "must be an object mapping token text to id"
                                               : "is missing");
    }
    if (!tj.merges) {
        model.fail("merges",
                   model.get("merges") ? "must be an array of token pairs" : "is missing");
    }
    for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        if (const auto value = model.optional_string(affix); value && !value->empty()) {
            model.fail(affix, "is not supported by byte-level BPE");
        }
    }
    BpeConfig config;
    config.vocab = std::move(*tj.vocab);
    config.merges = std::move(*tj.merges);
    config.unk_token = model.optional_string("unk_token");
    config.fuse_unk = model.boolean("fuse_unk", false);
    config.byte_fallback = model.boolean("byte_fallback", false);
    config.ignore_merges = model.boolean("ignore_merges", false);
    // "dropout" is a training-time regularizer; inference is deterministic without it.
    return config;
}

std::vector<AddedToken> read_added_tokens(const Fields& root) {
    std::vector<AddedToken> tokens;
    if (root.get("added_tokens") == nullptr) return tokens;
    const json& list = root.array("added_tokens");
    for (size_t i = 0; i < list.size(); ++i) {
        const Fields t(list[i], element_path("added_tokens", i));
        AddedToken token;
        token.id = t.id("id");
        token.content = t.string("content");
        token.special = t.boolean("special", false);
        token.single_word = t.boolean("single_word", false);
        token.lstrip = t.boolean("lstrip", false);
        token.rstrip = t.boolean("rstrip", false);
        token.normalized = t.boolean("normalized", !token.special);
        tokens.push_back(std::move(token));
    }
    return tokens;
}

}  // namespace

struct Tokenizer::Impl {
    // From tokenizer.json: the byte-level BPE model, with the vocabulary's ids.
    Impl(const json& doc, BpeConfig bpe);
    // From GGUF metadata.
    explicit Impl(const GgufVocab& vocab);
    void apply_config(const std::string& config_text);
    // Fills eog_ids from `known` (ids the configuration names) and the end-of-generation texts.
    void find_end_of_generation(std::initializer_list<std::optional<int32_t>> known);
    std::vector<int32_t> encode(std::string_view text, bool parse_special) const;
    std::string normalize(std::string_view text) const;
    std::optional<int32_t> token_id(std::string_view content) const;
    bool is_token(int32_t id) const {
        return id >= 0 && id < static_cast<int32_t>(kinds.size()) &&
               kinds[static_cast<size_t>(id)] != Kind::None;
    }

    enum class Kind : uint8_t { None, Regular, Added, Special };

    // Registers added tokens (their `content` is the token's text) in the tables, already sized,
    // and in the matchers.
    void add_tokens(std::vector<AddedToken> added);

    // Exactly one model is set.
    std::optional<BpeModel> bpe;  // byte-level BPE
    std::optional<SpmModel> spm;  // SentencePiece BPE
    // SentencePiece's dummy prefix: a space in front of the text and after each added token.
    bool space_prefix = false;
    std::optional<NormalForm> normalizer;
    PreTokenizer pre_tokenizer;
    AddedTokenMatcher raw_matcher;         // added tokens with normalized = false
    AddedTokenMatcher normalized_matcher;  // added tokens with normalized = true
    std::unordered_map<std::string, int32_t> added_by_content;
    std::vector<std::string> token_bytes;  // by id
    std::vector<Kind> kinds;               // by id

    std::optional<int32_t> eos_id, bos_id, pad_id;
    bool add_bos = false;
    std::string chat_template;
    std::vector<int32_t> eog_ids;  // ascending
};

Tokenizer::Impl::Impl(const json& doc, BpeConfig config) : bpe(std::in_place, std::move(config)) {
    const Fields root(doc, "");
    if (const json* n = root.get("normalizer"))
        normalizer = read_normalizer(Fields(*n, "normalizer"));

    bool byte_level_seen = false;
    if (const json* p = root.get("pre_tokenizer")) {
        read_pre_tokenizer(Fields(*p, "pre_tokenizer"), pre_tokenizer, byte_level_seen);
    }
    if (!byte_level_seen) {
        throw std::runtime_error(
            "pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers are supported");
    }
    if (root.get("decoder") == nullptr) {
        throw std::runtime_error("decoder is missing; only the ByteLevel decoder is supported");
    }
    if (const std::string type = root.object("decoder").string("type"); type != "ByteLevel") {
        throw std::runtime_error("decoder.type \"" + type +
                                 "\" is not supported (only ByteLevel is)");
    }

    std::vector<AddedToken> added = read_added_tokens(root);

    // Ids come from the file, so refuse id spaces so sparse that the tables would dwarf the
    // vocabulary.
    int64_t max_id = -1;
    for (const auto& entry : bpe->vocab()) max_id = std::max<int64_t>(max_id, entry.second);
    for (const AddedToken& t : added) max_id = std::max<int64_t>(max_id, t.id);
    const auto entries = static_cast<int64_t>(bpe->vocab().size() + added.size());
    if (max_id >= 2 * entries + 1024) {
        throw std::runtime_error("token id " + std::to_string(max_id) +
                                 " is far beyond the number of tokens (" + std::to_string(entries) +
                                 ")");
    }
    token_bytes.resize(static_cast<size_t>(max_id + 1));
    kinds.resize(static_cast<size_t>(max_id + 1), Kind::None);
    for (const auto& [text, id] : bpe->vocab()) {
        // Tokens outside the byte-level alphabet stand for their own UTF-8 text, as in the
        // ByteLevel decoder.
        token_bytes[static_cast<size_t>(id)] = byte_level_decode(text).value_or(text);
        kinds[static_cast<size_t>(id)] = Kind::Regular;
    }
    add_tokens(std::move(added));
}

void Tokenizer::Impl::add_tokens(std::vector<AddedToken> added) {
    std::vector<AddedToken> raw_tokens, normalized_tokens;
    for (AddedToken& t : added) {
        token_bytes[static_cast<size_t>(t.id)] = t.content;
        kinds[static_cast<size_t>(t.id)] = t.special ? Kind::Special : Kind::Added;
        added_by_content.emplace(t.content, t.id);
        if (t.normalized) {
            // Matched against normalized text, so compare with the normalized content.
            t.content = normalize(t.content);
            normalized_tokens.push_back(std::move(t));
        } else {
            raw_tokens.push_back(std::move(t));
        }
    }
    raw_matcher = AddedTokenMatcher(raw_tokens);
    normalized_matcher = AddedTokenMatcher(normalized_tokens);
}

namespace {

// A SentencePiece byte token "<0xAB>": the byte, or nullopt for any other text.
std::optional<unsigned char> byte_token_value(std::string_view text) {
    if (text.size() != 6 || !text.starts_with("<0x") || text.back() != '>') return std::nullopt;
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(text.data() + 3, text.data() + 5, value, 16);
    if (ec != std::errc() || end != text.data() + 5) return std::nullopt;
    return static_cast<unsigned char>(value);
}

}  // namespace

Tokenizer::Impl::Impl(const GgufVocab& v) {
    const size_t n = v.tokens.size();
    if (n == 0) throw std::runtime_error("tokenizer.ggml.tokens is empty");
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        throw std::runtime_error("tokenizer.ggml.tokens has too many tokens");
    }
    const auto check_length = [n](const char* key, size_t length) {
        if (length != 0 && length != n) {
            throw std::runtime_error(std::string(key) + " has " + std::to_string(length) +
                                     " entries for " + std::to_string(n) + " tokens");
        }
    };
    check_length("tokenizer.ggml.token_type", v.types.size());
    check_length("tokenizer.ggml.scores", v.scores.size());
    const auto type = [&](size_t id) {
        return v.types.empty() ? GgufTokenType::Normal : v.types[id];
    };
    // Ids outside the vocabulary count as absent.
    const auto valid = [n](std::optional<int32_t> id) {
        return id && *id >= 0 && static_cast<size_t>(*id) < n ? id : std::nullopt;
    };
    const auto is_added = [](GgufTokenType t) {
        return t == GgufTokenType::Control || t == GgufTokenType::Unknown ||
               t == GgufTokenType::UserDefined;
    };

    token_bytes.resize(n);
    kinds.resize(n, Kind::Regular);
    std::vector<AddedToken> added;
    for (size_t id = 0; id < n; ++id) {
        const GgufTokenType t = type(id);
        if (!is_added(t)) continue;
        AddedToken token;
        token.id = static_cast<int32_t>(id);
        token.content = v.tokens[id];
        token.special = t != GgufTokenType::UserDefined;
        added.push_back(std::move(token));
    }

    if (v.model == "gpt2") {
        const GgufPreTokenizer& pre = gguf_pre_tokenizer(v.pre);
        BpeConfig config;
        config.vocab.reserve(n);
        for (size_t id = 0; id < n; ++id) {
            config.vocab.emplace_back(v.tokens[id], static_cast<int32_t>(id));
        }
        config.merges.reserve(v.merges.size());
        for (size_t rank = 0; rank < v.merges.size(); ++rank) {
            // Byte-level texts hold no space (it is mapped to 'Ġ'), so the first one separates
            // the pair; llama.cpp searches from the second character on, and so do we.
            const std::string& merge = v.merges[rank];
            const size_t space = merge.find(' ', 1);
            if (space == std::string::npos) {
                throw std::runtime_error("tokenizer.ggml.merges[" + std::to_string(rank) +
                                         "] \"" + merge + "\" is not two tokens");
            }
            config.merges.emplace_back(merge.substr(0, space), merge.substr(space + 1));
        }
        config.ignore_merges = pre.ignore_merges;
        bpe.emplace(std::move(config));
        for (std::string_view regex : pre.regexes) {
            pre_tokenizer.add_split(regex, false, SplitBehavior::Isolated, false);
        }
        // As for tokenizer.json (add_tokens() overrides added tokens).
        for (size_t id = 0; id < n; ++id) {
            token_bytes[id] = byte_level_decode(v.tokens[id]).value_or(v.tokens[id]);
        }
        add_bos = v.add_bos.value_or(pre.add_bos);
        bos_id = valid(v.bos_id);
        eos_id = valid(v.eos_id);
    } else if (v.model == "llama") {
        std::vector<SpmPiece> pieces;
        std::array<int32_t, 256> byte_ids;
        byte_ids.fill(-1);
        for (size_t id = 0; id < n; ++id) {
            const GgufTokenType t = type(id);
            const std::string& text = v.tokens[id];
            const auto byte = t == GgufTokenType::Byte ? byte_token_value(text) : std::nullopt;
            if (byte) {
                byte_ids[*byte] = static_cast<int32_t>(id);
                token_bytes[id] = std::string(1, static_cast<char>(*byte));
                continue;
            }
            // Text merges into normal and user-defined pieces only, as in SentencePiece.
            if (t == GgufTokenType::Normal || t == GgufTokenType::UserDefined) {
                pieces.push_back({text, v.scores.empty() ? 0.0f : v.scores[id],
                                  static_cast<int32_t>(id)});
            }
            token_bytes[id] = spm_unescape(text);  // add_tokens() overrides added tokens
        }
        // llama.cpp's defaults for SentencePiece vocabularies.
        const auto fallback = [&](std::optional<int32_t> id, int32_t default_id) {
            return valid(id ? id : std::optional(default_id));
        };
        spm.emplace(std::move(pieces), byte_ids, fallback(v.unk_id, 0));
        space_prefix = v.add_space_prefix.value_or(true);
        add_bos = v.add_bos.value_or(true);
        bos_id = fallback(v.bos_id, 1);
        eos_id = fallback(v.eos_id, 2);
    } else {
        throw std::runtime_error("tokenizer.ggml.model \"" + untrusted::escape(v.model) +
                                 "\" is not supported (gpt2, llama)");
    }
    add_tokens(std::move(added));
    pad_id = valid(v.pad_id);
    chat_template = v.chat_template;
    find_end_of_generation({eos_id, v.eot_id, v.eom_id, v.fim_pad_id, v.fim_rep_id, v.fim_sep_id});
}

void Tokenizer::Impl::find_end_of_generation(
    std::initializer_list<std::optional<int32_t>> known) {
    // llama.cpp's texts of end-of-turn tokens, and of the fill-in-the-middle pad, repository and
    // file-separator tokens, which it also stops on.
    static constexpr std::string_view kTexts[] = {
        "<|eot_id|>",      "<|im_end|>",     "<|end|>",       "<end_of_turn>",
        "<|endoftext|>",   "<|eom_id|>",     "<EOT>",         "_<EOT>",
        "<|end_of_text|>", "<end_of_utterance>", "<|fim_pad|>",   "<fim-pad>",
        "<fim_pad>",       "<PAD>",          "<|fim_repo|>",  "<|repo_name|>",
        "<fim-repo>",      "<REPO>",         "<reponame>",    "<|file_sep|>",
    };
    std::set<int32_t> ids;
    for (const auto& id : known) {
        if (id && is_token(*id)) ids.insert(*id);
    }
    for (std::string_view text : kTexts) {
        if (const auto id = token_id(text)) ids.insert(*id);
    }
    eog_ids.assign(ids.begin(), ids.end());
}

void Tokenizer::Impl::apply_config(const std::string& config_text) {
    const json doc = untrusted::parse_json(config_text);
    const Fields root(doc, "");
    // Special tokens appear either as plain strings or as {"content": ...} objects.
    const auto special = [&](const char* key) -> std::optional<int32_t> {
        const json* v = root.get(key);
        if (v == nullptr) return std::nullopt;
        const std::string content =
            v->is_string() ? v->get<std::string>() : Fields(*v, root.where(key)).string("content");
        const auto id = token_id(content);
        if (!id) root.fail(key, "\"" + untrusted::escape(content) + "\" is not a token of tokenizer.json");
        return id;
    };
    eos_id = special("eos_token");
    bos_id = special("bos_token");
    pad_id = special("pad_token");
    add_bos = root.boolean("add_bos_token", false);

    // Either one template, or a list of named ones of which "default" is the chat template.
    if (const json* t = root.get("chat_template")) {
        if (t->is_string()) {
            chat_template = t->get<std::string>();
        } else if (t->is_array()) {
            for (size_t i = 0; i < t->size(); ++i) {
                const Fields named((*t)[i], element_path("chat_template", i));
                if (named.string("name") == "default") chat_template = named.string("template");
            }
        } else {
            root.fail("chat_template", "must be a string or a list of named templates");
        }
    }
}

std::string Tokenizer::Impl::normalize(std::string_view text) const {
    return normalizer ? unicode_normalize(text, *normalizer) : std::string(text);
}

std::optional<int32_t> Tokenizer::Impl::token_id(std::string_view content) const {
    if (const auto it = added_by_content.find(std::string(content)); it != added_by_content.end()) {
        return it->second;
    }
    return bpe ? bpe->find_token(content) : spm->find_token(content);
}

std::vector<int32_t> Tokenizer::Impl::encode(std::string_view text, bool parse_special) const {
    std::string repaired;
    if (!is_valid_utf8(text)) {
        repaired = to_valid_utf8(text);
        text = repaired;
    }
    std::vector<int32_t> ids;
    BpeScratch scratch;
    bool after_token = true;  // at the start of the text or right after an added token
    for (const auto& segment : raw_matcher.split(text, parse_special)) {
        if (segment.id >= 0) {
            ids.push_back(segment.id);
            after_token = true;
            continue;
        }
        if (spm) {
            spm->encode(segment.text, space_prefix && after_token, ids);
            after_token = false;
            continue;
        }
        const std::string normalized = normalize(segment.text);
        for (const auto& inner : normalized_matcher.split(normalized, parse_special)) {
            if (inner.id >= 0) {
                ids.push_back(inner.id);
                continue;
            }
            for (const std::string& piece : pre_tokenizer.split(inner.text)) {
                bpe->encode_word(piece, scratch, ids);
            }
        }
    }
    return ids;
}

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::load(const std::string& json_text, const std::string& json_name,
                          const std::string& config_text, const std::string& config_name) {
    std::shared_ptr<Impl> impl;
    try {
        TokenizerJson tj = parse_tokenizer_json(json_text);
        impl = std::make_shared<Impl>(tj.doc, read_bpe_config(tj));
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(json_name + ": " + e.what());
    }
    if (!config_text.empty()) {
        try {
            impl->apply_config(config_text);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(config_name + ": " + e.what());
        }
    }
    impl->find_end_of_generation({impl->eos_id});
    return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_gguf_vocab(const GgufVocab& vocab) {
    return Tokenizer(std::make_shared<const Impl>(vocab));
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
    const GgufVocab vocab = read_gguf_vocab(file);
    try {
        return from_gguf_vocab(vocab);
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(file.path() + ": " + e.what());
    }
}

Tokenizer Tokenizer::from_json_text(const std::string& json_text,
                                    const std::string& config_json_text) {
    return load(json_text, "tokenizer.json", config_json_text, "tokenizer_config.json");
}

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
    const std::string json_text = untrusted::read_regular_file(tokenizer_json_path, untrusted::kMaxJsonFileBytes);
    const std::filesystem::path config_path =
        std::filesystem::path(tokenizer_json_path).parent_path() / "tokenizer_config.json";
    const bool has_config = untrusted::describe_path(config_path.string()) != "missing";
    return load(json_text, tokenizer_json_path,
                has_config ? untrusted::read_regular_file(config_path.string(), untrusted::kMaxSmallJsonFileBytes)
                           : std::string(),
                config_path.string());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    return impl_->encode(text, parse_special);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string bytes;
    for (size_t i = 0; i < ids.size(); ++i) {
        const int32_t id = ids[i];
        if (!impl_->is_token(id)) continue;
        const Impl::Kind kind = impl_->kinds[static_cast<size_t>(id)];
        if (skip_special && kind == Impl::Kind::Special) continue;
        std::string_view piece = impl_->token_bytes[static_cast<size_t>(id)];
        // Like llama.cpp, only the very first token gives the prefixed space back.
        if (i == 0 && impl_->space_prefix && kind == Impl::Kind::Regular &&
            piece.starts_with(' ')) {
            piece.remove_prefix(1);
        }
        bytes += piece;
    }
    return to_valid_utf8(bytes);
}

std::string Tokenizer::token_text(int32_t id) const {
    return impl_->is_token(id) ? impl_->token_bytes[static_cast<size_t>(id)] : std::string();
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->token_bytes.size()); }

std::optional<int32_t> Tokenizer::token_id(std::string_view token_content) const {
    return impl_->token_id(token_content);
}

bool Tokenizer::is_special(int32_t id) const {
    return impl_->is_token(id) && impl_->kinds[static_cast<size_t>(id)] == Impl::Kind::Special;
}

std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos_id; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::pad_token_id() const { return impl_->pad_id; }
bool Tokenizer::add_bos_token() const { return impl_->add_bos; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
const std::vector<int32_t>& Tokenizer::end_of_generation_ids() const { return impl_->eog_ids; }
bool Tokenizer::is_end_of_generation(int32_t id) const {
    return std::binary_search(impl_->eog_ids.begin(), impl_->eog_ids.end(), id);
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
    if (skip_special_ && tokenizer_.is_special(id)) return {};
    pending_ += tokenizer_.token_text(id);
    std::string out;
    pending_.erase(0, append_utf8_lossy(pending_, out, /*final=*/false));
    return out;
}

std::string StreamDecoder::flush() {
    std::string out = to_valid_utf8(pending_);
    pending_.clear();
    return out;
}

}  // namespace tracelm
