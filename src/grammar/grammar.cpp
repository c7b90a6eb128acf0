// Compiler and Matcher (grammar.h) over xgrammar's C++ core.
#include "grammar/grammar.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tracelm::grammar {

struct Compiled::Impl {
    xgrammar::CompiledGrammar grammar;
};

Compiled::Compiled(std::unique_ptr<const Impl> impl, int64_t vocab_size)
    : impl_(std::move(impl)), vocab_size_(vocab_size) {}

Compiled::~Compiled() = default;

namespace {

// The vocabulary as xgrammar matches it: each token's raw bytes. End-of-generation tokens (and ids past the
// tokenizer's) are empty, which xgrammar treats as special: never matched, never accepted. Other special tokens get
// a byte 0xFF before their text: no grammar text can hold that byte (grammars come as valid UTF-8 and xgrammar's
// character classes match code points), so text never matches them either, yet a constraint may ask for one by id
// (a forced tool call's [TOOL_CALLS] marker), which xgrammar refuses for the tokens it holds special.
xgrammar::TokenizerInfo tokenizer_info(const Tokenizer& tok, int64_t vocab_size, std::vector<int32_t> end_ids) {
    if (end_ids.empty()) end_ids = tok.end_of_generation_ids();
    std::vector<std::string> vocab(static_cast<size_t>(vocab_size));
    for (int32_t id = 0; id < std::min<int64_t>(vocab_size, tok.vocab_size()); ++id) {
        if (std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end()) continue;
        std::string& text = vocab[static_cast<size_t>(id)] = tok.token_text(id);
        if (tok.is_special(id)) text.insert(text.begin(), '\xff');
    }
    return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, static_cast<int>(vocab_size), end_ids, false);
}

}  // namespace

struct Compiler::Impl {
    xgrammar::GrammarCompiler compiler;
};

Compiler::Compiler(const Tokenizer& tokenizer, int64_t vocab_size, const std::vector<int32_t>& end_ids,
                   int64_t cache_bytes)
    // One thread per compilation: it runs on the requesting connection's thread, beside the decode steps.
    : impl_(std::make_unique<Impl>(
          Impl{xgrammar::GrammarCompiler(tokenizer_info(tokenizer, vocab_size, end_ids), 1, true, cache_bytes)})),
      vocab_size_(vocab_size) {}

Compiler::~Compiler() = default;

int64_t Compiler::cache_bytes() const { return impl_->compiler.GetCacheSizeBytes(); }

std::shared_ptr<const Compiled> Compiler::compile(const Spec& spec) const {
    if (spec.kind != Kind::JsonSchema && spec.kind != Kind::JsonObject && spec.text.size() > kMaxGrammarBytes)
        throw GrammarError("grammar is longer than " + std::to_string(kMaxGrammarBytes) + " bytes");
    if (spec.kind == Kind::JsonSchema) check_json_schema(spec.text);
    // Compact JSON (no free whitespace: a small model left free whitespace may emit it forever), and strict: no
    // properties or items the schema does not name, which every answer valid under the schema allows anyway.
    auto& c = impl_->compiler;
    const auto compiled = [&]() -> xgrammar::CompiledGrammar {
        switch (spec.kind) {
            case Kind::JsonObject:
                return c.CompileJSONSchema(R"({"type": "object"})", false, std::nullopt, std::nullopt, true);
            case Kind::JsonSchema:
                return c.CompileJSONSchema(spec.text, false, std::nullopt, std::nullopt, true);
            case Kind::Regex:
                return c.CompileRegex(spec.text);
            case Kind::Ebnf:
                return c.CompileGrammar(spec.text, "root");
            case Kind::StructuralTag:
                return c.CompileStructuralTag(spec.text);
        }
        throw GrammarError("unknown constraint kind");
    };
    try {
        return std::make_shared<Compiled>(std::make_unique<const Compiled::Impl>(Compiled::Impl{compiled()}),
                                          vocab_size_);
    } catch (const GrammarError&) {
        throw;
    } catch (const std::exception& e) {
        throw GrammarError(e.what());
    }
}

struct Matcher::Impl {
    std::shared_ptr<const Compiled> compiled;
    xgrammar::GrammarMatcher matcher;
};

Matcher::Matcher(std::shared_ptr<const Compiled> compiled)
    : impl_(std::make_unique<Impl>(Impl{compiled, xgrammar::GrammarMatcher(compiled->impl().grammar)})) {}

Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

void Matcher::fill_mask(uint32_t* words) {
    int64_t shape = (impl_->compiled->vocab_size() + 31) / 32;
    DLTensor t{};
    t.data = words;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = DLDataType{kDLInt, 32, 1};
    t.shape = &shape;
    impl_->matcher.FillNextTokenBitmask(&t);
}

bool Matcher::accept(int32_t id) { return impl_->matcher.AcceptToken(id); }

bool Matcher::complete() const { return impl_->matcher.IsCompleted() || impl_->matcher.IsTerminated(); }

bool Matcher::terminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace tracelm::grammar
