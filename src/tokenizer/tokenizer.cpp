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
#include "tokenizer/normalizer.h"
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

// A SentencePiece byte token "<0xAB>": the byte, or nullopt for any other text.
std::optional<unsigned char> byte_token_value(std::string_view text) {
    if (text.size() != 6 || !text.starts_with("<0x") || text.back() != '>') return std::nullopt;
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(text.data() + 3, text.data() + 5, value, 16);
    if (ec != std::errc() || end != text.data() + 5) return std::nullopt;
    return static_cast<unsigned char>(value);
}

std::string element_path(const std::string& array_path, size_t index) {
    return array_path + "[" + std::to_string(index) + "]";
}

// Adds a Replace step read from `step` (a normalizer's or a decoder's) to `out`.
void read_replace(const Fields& step, Normalizer& out) {
    const auto literal = step.object("pattern").optional_string("String");
    if (!literal || literal->empty()) step.fail("pattern", "must be a non-empty String (Regex is not supported)");
    try {
        out.add_replace(*literal, step.string("content"));
    } catch (const std::runtime_error& e) {
        step.fail("type", e.what());
    }
}

void read_normalizer(const Fields& n, Normalizer& out) {
    const std::string type = n.string("type");
    const auto form = [&](NormalForm f) {
        try {
            out.add_form(f);
        } catch (const std::runtime_error& e) {
            n.fail("type", e.what());
        }
    };
    if (type == "NFC") {
        form(NormalForm::NFC);
    } else if (type == "NFD") {
        form(NormalForm::NFD);
    } else if (type == "NFKC") {
        form(NormalForm::NFKC);
    } else if (type == "NFKD") {
        form(NormalForm::NFKD);
    } else if (type == "Replace") {
        read_replace(n, out);
    } else if (type == "Sequence") {
        const json& list = n.array("normalizers");
        for (size_t i = 0; i < list.size(); ++i) {
            read_normalizer(Fields(list[i], element_path(n.where("normalizers"), i)), out);
        }
    } else {
        n.fail("type", "\"" + untrusted::escape(type) +
                           "\" is not a supported normalizer (NFC, NFD, NFKC, NFKD, Replace, Sequence)");
    }
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

// How a token's text becomes bytes: the ByteLevel decoder maps the GPT-2 byte alphabet back; SentencePiece-style
// files decode with a Sequence of Replace (for instance "▁" -> " "), ByteFallback (<0xXX> tokens are that byte)
// and Fuse (joining, which decode() does anyway).
struct Decoder {
    bool byte_level = false;
    bool byte_fallback = false;
    Normalizer replacements;  // the Replace steps, in order: the same literal replacement as the normalizer's

    std::string decode(const std::string& text) const {
        // Tokens outside the byte-level alphabet stand for their own UTF-8 text, as in the ByteLevel decoder.
        if (byte_level) return byte_level_decode(text).value_or(text);
        const auto byte = byte_fallback ? byte_token_value(text) : std::nullopt;
        return byte ? std::string(1, static_cast<char>(*byte)) : replacements.apply(text);
    }
};

Decoder read_decoder(const Fields& root) {
    if (root.get("decoder") == nullptr) root.fail("decoder", "is missing");
    const Fields d = root.object("decoder");
    Decoder out;
    const std::string type = d.string("type");
    if (type == "ByteLevel") {
        out.byte_level = true;
        return out;
    }
    if (type != "Sequence") {
        d.fail("type", "\"" + untrusted::escape(type) +
                           "\" is not supported (ByteLevel, or a Sequence of Replace, ByteFallback and Fuse)");
    }
    const json& list = d.array("decoders");
    for (size_t i = 0; i < list.size(); ++i) {
        const Fields step(list[i], element_path(d.where("decoders"), i));
        const std::string step_type = step.string("type");
        if (step_type == "Replace") {
            read_replace(step, out.replacements);
        } else if (step_type == "ByteFallback") {
            out.byte_fallback = true;
        } else if (step_type != "Fuse") {
            step.fail("type",
                      "\"" + untrusted::escape(step_type) + "\" is not supported (Replace, ByteFallback, Fuse)");
        }
    }
    return out;
}

BpeConfig read_bpe_config(TokenizerJson& tj) {
    const Fields root(tj.doc, "");
    const Fields model = root.object("model");
    if (const auto type = model.optional_string("type"); type && *type != "BPE") {
        model.fail("type", "\"" + untrusted::escape(*type) + "\" is not supported (only BPE is)");
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
            model.fail(affix, "is not supported");
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
    // Fills eog_ids (tokenizer.json) from EOS and llama.cpp's end-of-generation texts.
    void find_end_of_generation();
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
    Normalizer normalizer;
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

Tokenizer::Impl::Impl(const json& doc, BpeConfig config) {
    const Fields root(doc, "");
    if (const json* n = root.get("normalizer")) read_normalizer(Fields(*n, "normalizer"), normalizer);

    bool byte_level_seen = false;
    if (const json* p = root.get("pre_tokenizer")) {
        read_pre_tokenizer(Fields(*p, "pre_tokenizer"), pre_tokenizer, byte_level_seen);
    }
    const Decoder decoder = read_decoder(root);
    if (decoder.byte_level != byte_level_seen) {
        throw std::runtime_error(byte_level_seen ? "pre_tokenizer has a ByteLevel step but the decoder is not ByteLevel"
                                                 : "decoder is ByteLevel but pre_tokenizer has no ByteLevel step");
    }
    config.byte_level = byte_level_seen;
    bpe.emplace(std::move(config));

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
        token_bytes[static_cast<size_t>(id)] = decoder.decode(text);
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
    const bool sentencepiece = v.model == "llama";
    if (!sentencepiece && v.model != "gpt2") {
        throw std::runtime_error("tokenizer.ggml.model \"" + untrusted::escape(v.model) +
                                 "\" is not supported (gpt2, llama)");
    }
    // Ids outside the vocabulary count as absent; SentencePiece vocabularies have llama.cpp's defaults.
    const auto valid = [n](std::optional<int32_t> id) {
        return id && *id >= 0 && static_cast<size_t>(*id) < n ? id : std::nullopt;
    };
    const auto with_default = [&](std::optional<int32_t> id, int32_t spm_default) {
        return valid(id || !sentencepiece ? id : std::optional(spm_default));
    };
    bos_id = with_default(v.bos_id, 1);
    eos_id = with_default(v.eos_id, 2);
    pad_id = valid(v.pad_id);
    const GgufTokenRoles roles = gguf_token_roles(v, eos_id);
    eog_ids = roles.eog_ids;

    token_bytes.resize(n);
    kinds.resize(n, Kind::Regular);
    std::vector<AddedToken> added;
    for (size_t id = 0; id < n; ++id) {
        const GgufTokenType t = roles.types[id];
        if (t != GgufTokenType::Control && t != GgufTokenType::Unknown && t != GgufTokenType::UserDefined) continue;
        AddedToken token;
        token.id = static_cast<int32_t>(id);
        token.content = v.tokens[id];
        token.special = t != GgufTokenType::UserDefined;
        added.push_back(std::move(token));
    }

    if (sentencepiece) {
        std::vector<SpmPiece> pieces;
        pieces.reserve(n);
        std::array<int32_t, 256> byte_ids;
        byte_ids.fill(-1);
        for (size_t id = 0; id < n; ++id) {
            // As in llama.cpp: text merges into every token whatever its type, a character without a token
            // falls back to the tokens named <0xXX> (the last of duplicates), and only byte tokens decode to
            // their byte (add_tokens() sets the text of added tokens).
            const std::string& text = v.tokens[id];
            const auto byte = byte_token_value(text);
            if (byte) byte_ids[*byte] = static_cast<int32_t>(id);
            pieces.push_back({text, v.scores.empty() ? 0.0f : v.scores[id], static_cast<int32_t>(id)});
            const bool byte_type = byte && roles.types[id] == GgufTokenType::Byte;
            token_bytes[id] = byte_type ? std::string(1, static_cast<char>(*byte)) : spm_unescape(text);
        }
        spm.emplace(std::move(pieces), byte_ids, with_default(v.unk_id, 0));
        space_prefix = v.add_space_prefix.value_or(true);
        add_bos = v.add_bos.value_or(true);
    } else {
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
    }
    add_tokens(std::move(added));
    chat_template = v.chat_template;
}

void Tokenizer::Impl::find_end_of_generation() {
    std::set<int32_t> ids;
    if (eos_id && is_token(*eos_id)) ids.insert(*eos_id);
    for (std::string_view text : end_of_generation_texts()) {
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
    return normalizer.apply(text);
}

std::optional<int32_t> Tokenizer::Impl::token_id(std::string_view content) const {
    if (const auto it = added_by_content.find(std::string(content)); it != added_by_content.end()) {
        return it->second;
    }
    if (spm) return spm->find_token(content);
    // A SentencePiece-style vocabulary spells the text as its normalizer does (" " as "▁").
    return bpe->find_token(bpe->byte_level() ? std::string(content) : normalize(content));
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
    impl->find_end_of_generation();
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
