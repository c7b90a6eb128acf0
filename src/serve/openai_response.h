// OpenAI's response shapes: chat.completion, chat.completion.chunk and text_completion bodies, their logprobs,
// usage, server-sent events and the error body.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_calls/tool_calls.h"
#include "ops/sampling/sampling.h"
#include "serve/openai_request.h"
#include "serve/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace tracelm::serve {

struct ResponseMeta {
    std::string id;       // "chatcmpl-..." / "cmpl-..."
    int64_t created = 0;  // Unix seconds
    std::string model;
};

struct Usage {
    int64_t prompt_tokens = 0, completion_tokens = 0;
};

// "stop" or "length" (Cancelled and Error have no OpenAI reason: "stop" and "error").
const char* finish_reason(Finish f);

// The logprobs of answer tokens. Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]};
// completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"} with each token's
// offset in characters from `text_offsets`. A token's text is its decoded form (U+FFFD for part of a character);
// "bytes" are its raw bytes. -inf becomes -9999.0 as in OpenAI's API.
nlohmann::json logprobs_json(Endpoint endpoint, const Tokenizer& tok, const std::vector<sampling::TokenLogprobs>& lps,
                             const std::vector<size_t>& text_offsets = {});

// Completions' logprobs of an echoed prompt, in logprobs_json's shape: the first token without a log-probability
// (null, as OpenAI shows it; nothing precedes it), then token i + 1 from lps[i], each offset in characters from the
// prompt text's start (the text its ids decode to).
nlohmann::json prompt_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                    const std::vector<sampling::TokenLogprobs>& lps);
// Completions' logprobs `more` appended to `into` (both logprobs_json's shape), its offsets moved by `offset`
// characters.
void append_logprobs(nlohmann::json& into, const nlohmann::json& more, size_t offset = 0);

// A parsed tool call as OpenAI shows it: {"id", "type": "function", "function": {"name", "arguments"}}.
nlohmann::json tool_call_json(const std::string& id, const tools::ToolCall& call);

// One choice of a non-streamed answer: its text, how it ended, its logprobs (null when not asked for) and, chat
// only, its tool calls (a list of tool_call_json).
struct ChoiceResult {
    std::string text;
    Finish finish = Finish::Stop;
    nlohmann::json logprobs;
    nlohmann::json tool_calls = nlohmann::json::array();
};

// The non-streamed answer, choice i at index i. A choice with tool calls carries them in its message, its content
// null when empty, and a Stop finishes with "tool_calls".
nlohmann::json response_body(Endpoint endpoint, const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                             const Usage& usage);
// One streamed chunk of the choice at `choice`: `text` as the delta (chat: with the assistant role when `first`),
// finish_reason null until `finish` is Stop or Length ("tool_calls" for a Stop when the answer made calls).
nlohmann::json chunk(Endpoint endpoint, const ResponseMeta& meta, size_t choice, const std::string& text,
                     Finish finish, const nlohmann::json& logprobs, bool first = false, bool made_calls = false);
// The two chunks that stream the choice's call at `index`, as OpenAI streams one: its id, type, name and empty
// arguments, then the arguments.
std::vector<nlohmann::json> tool_call_chunks(const ResponseMeta& meta, size_t choice, size_t index,
                                             const std::string& id, const tools::ToolCall& call);
// The last chunk of a stream with stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(Endpoint endpoint, const ResponseMeta& meta, const Usage& usage);

// The answer of POST /v1/embeddings: {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
// "model", "usage": {"prompt_tokens", "total_tokens"}}. Each vector is L2-normalised (as Qwen3-Embedding and
// sentence-transformers normalise; a zero vector stays zero), then written as numbers or, with `base64`, as the
// base64 of its little-endian float32 bytes (what OpenAI's clients decode).
nlohmann::json embeddings_body(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                               int64_t prompt_tokens);

// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
nlohmann::json error_body(const ApiError& e);

// JSON text (invalid UTF-8, which the builders never produce, would be replaced rather than throw).
std::string dump(const nlohmann::json& j);
// A server-sent event: "data: <json>\n\n".
std::string sse(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace tracelm::serve
