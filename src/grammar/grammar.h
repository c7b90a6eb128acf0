// Constrained decoding (docs/structured-output.md): a request's constraint (a JSON schema, any JSON object, a
// regex, an EBNF grammar) compiled for a model's vocabulary, and the matcher of one sequence, which gives the tokens
// allowed next (a bitmask in the layout of ops/sampling/sampling.h's adjust_logits) before each decode step and
// takes the sampled token after it. The engine underneath is xgrammar's C++ core (the one vLLM, SGLang and
// TensorRT-LLM use); nothing of it shows in this header.
//
// A forced tool call (tool_choice "required" or a named function) reaches the decoder the same way: the model's
// tool-call format written as xgrammar's structural tag (Kind::StructuralTag, serve/forced_tool_call.h), compiled
// here and matched per row like any other constraint.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tracelm::grammar {

// The constraint is invalid or uses what is not supported; the message names it (a 400 in the server).
struct GrammarError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

enum class Kind {
    JsonObject,     // any JSON object (OpenAI's response_format json_object)
    JsonSchema,     // text: a JSON schema (checked by check_json_schema first)
    Regex,          // text: a regular expression the whole output matches
    Ebnf,           // text: an EBNF grammar in xgrammar's dialect (GBNF-like), root rule "root"
    StructuralTag,  // text: xgrammar's structural tag JSON (tool-call formats)
};

struct Spec {
    Kind kind = Kind::JsonObject;
    std::string text;
};

// Limits of a JSON schema, so that a hostile one is refused in bounded time and memory.
constexpr size_t kMaxSchemaBytes = 64 * 1024;
constexpr int kMaxSchemaDepth = 32;
constexpr int kMaxSchemaNodes = 4096;
constexpr int64_t kMaxRepeat = 1024;  // minItems / maxItems / minLength / maxLength
constexpr size_t kMaxGrammarBytes = 64 * 1024;  // a regex or an EBNF grammar

// Throws GrammarError naming the first keyword, type or limit it refuses: only the keywords of the supported subset
// (docs/structured-output.md), the seven JSON types, local $ref ("#/$defs/..." or "#/definitions/..."), and the
// limits above.
void check_json_schema(const std::string& schema_text);

// A compiled constraint: immutable, shared by every sequence that uses it.
class Compiled {
   public:
    struct Impl;  // grammar.cpp
    Compiled(std::unique_ptr<const Impl> impl, int64_t vocab_size);
    ~Compiled();
    Compiled(const Compiled&) = delete;
    Compiled& operator=(const Compiled&) = delete;
    // The vocabulary (logits per row) it was compiled for.
    int64_t vocab_size() const { return vocab_size_; }
    const Impl& impl() const { return *impl_; }

   private:
    std::unique_ptr<const Impl> impl_;
    int64_t vocab_size_;
};

// The constraint compiler of one model's vocabulary, with a cache of compiled constraints (bounded in bytes).
// Thread-safe: HTTP handler threads compile before they queue a request.
class Compiler {
   public:
    // vocab_size: the model's logits (at least the tokenizer's ids). Special tokens never match grammar text (a
    // structural tag may still ask for one by id); end_ids (empty: the tokenizer's end-of-generation ids) end a
    // complete constraint, and only they.
    Compiler(const Tokenizer& tokenizer, int64_t vocab_size, const std::vector<int32_t>& end_ids = {},
             int64_t cache_bytes = 256LL << 20);
    ~Compiler();
    Compiler(const Compiler&) = delete;
    Compiler& operator=(const Compiler&) = delete;
    // Throws GrammarError for an invalid or unsupported constraint.
    std::shared_ptr<const Compiled> compile(const Spec& spec) const;
    int64_t vocab_size() const { return vocab_size_; }
    int64_t cache_bytes() const;

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int64_t vocab_size_;
};

// The state of one sequence in its constraint. Not thread-safe (the scheduler's thread owns it).
class Matcher {
   public:
    explicit Matcher(std::shared_ptr<const Compiled> compiled);
    ~Matcher();
    Matcher(Matcher&&) noexcept;
    Matcher& operator=(Matcher&&) noexcept;
    // Writes the tokens allowed next into words (mask_words(vocab_size) words); once the constraint is complete
    // only the end-of-generation tokens are allowed.
    void fill_mask(uint32_t* words);
    // Advances by a sampled token; false when the constraint does not allow it (the state is then unchanged).
    bool accept(int32_t id);
    // Whether the constraint may end here (an end-of-generation token is allowed next).
    bool complete() const;
    // Whether it took an end-of-generation token: nothing may follow.
    bool terminated() const;

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tracelm::grammar
