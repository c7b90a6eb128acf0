// The JSON bodies of POST /v1/chat/completions and /v1/completions, parsed and validated into a plain request.
// Every invalid value throws ApiError naming its parameter, in OpenAI's error shape; so does a field the server does
// not implement (as OpenAI answers one it does not know): no parameter is silently ignored.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"
#include "ops/sampling/options.h"

namespace tracelm::serve {

// An error answered with `status` and {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
    int status;
    std::string type, param, code;  // param / code empty: null
    int retry_after = 0;            // > 0: the response's Retry-After header, in seconds (a 503 to retry)
    ApiError(int http_status, const std::string& message, std::string error_type, std::string error_param = "",
             std::string error_code = "")
        : std::runtime_error(message),
          status(http_status),
          type(std::move(error_type)),
          param(std::move(error_param)),
          code(std::move(error_code)) {}
};
// 400 invalid_request_error naming `param`.
ApiError invalid_param(const std::string& param, const std::string& message, const std::string& code = "invalid_value");

enum class Endpoint { ChatCompletions, Completions };

constexpr int kMaxStopStrings = 4;  // as OpenAI
constexpr int kMaxChoices = 128;    // n, and n times the prompts of a completion: OpenAI's bound of n

// One prompt of /v1/completions: text, or token ids.
struct CompletionPrompt {
    std::string text;
    std::optional<std::vector<int32_t>> ids;
};

// tool_choice: whether the model may, must or must not call a tool (Named: the function tool_choice_name).
enum class ToolChoice { Auto, None, Required, Named };

struct OpenAIRequest {
    Endpoint endpoint = Endpoint::ChatCompletions;
    std::string model;                               // empty: not given
    // chat: the messages as the chat template sees them (chat/chat_template.h): role and content checked (developer
    // becomes system, a missing or null content ""), every other field as the client sent it
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();  // chat: more template variables
    // chat: the function tools as sent (checked: type "function", a name of [A-Za-z0-9_-]{1,64} given once, an
    // object of parameters); null when none
    nlohmann::ordered_json tools;
    ToolChoice tool_choice = ToolChoice::Auto;
    std::string tool_choice_name;      // Named: the function
    bool parallel_tool_calls = true;   // false: at most one call per answer
    // chat: the template's add_generation_prompt; continue_final_message: the prompt ends inside the last message
    // (an assistant's), which the answer continues (vLLM's fields)
    bool add_generation_prompt = true;
    bool continue_final_message = false;
    // completions: one prompt or several (a list of strings or of id lists); each gets n choices, choice
    // index = prompt index * n + j
    std::vector<CompletionPrompt> prompts;
    int n = 1;  // choices per prompt; n * prompts (chat: one) is at most kMaxChoices
    bool echo = false;  // completions: each choice's text opens with its prompt's
    bool stream = false;
    bool include_usage = false;         // stream_options.include_usage
    std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens; unset: the rest of the context
    std::string max_tokens_param = "max_tokens";  // which of the two the request named (errors name it)
    std::vector<std::string> stop;
    sampling::SamplingOptions sampling;  // logprobs: the number of top tokens when the request asked for logprobs
    bool ignore_eos = false;
    // logit_bias: (token id, bias in [-100, 100]) in the body's order, at most sampling::kMaxLogitBias; ids are
    // checked against the vocabulary by the server.
    std::vector<std::pair<int32_t, float>> logit_bias;
    // Constrained decoding (docs/structured-output.md): response_format json_object / json_schema, or one of the
    // extension fields guided_json, guided_regex, guided_grammar (vLLM), json_schema, grammar (llama-server).
    // constraint_param names the field its errors name.
    std::optional<grammar::Spec> constraint;
    std::string constraint_param;
};

// Throws ApiError (400) for malformed JSON, wrong types and invalid values.
OpenAIRequest parse_request(Endpoint endpoint, std::string_view body);

// POST /tokenize, in vLLM's shape ({"prompt": text} or {"messages": [...]}) or llama-server's ({"content": text}),
// told apart by those fields (docs/serve.md).
struct TokenizeRequest {
    std::string model;             // empty: not given
    bool llama_server = false;     // "content": answered {"tokens"} alone, as llama-server answers
    bool chat = false;             // "messages": the prompt a chat completion of them would get
    std::string text;              // "prompt" / "content"
    // Text: BOS in front when the tokenizer adds one (as completions do). vLLM's add_special_tokens defaults to
    // true, llama-server's add_special to false.
    bool add_special = true;
    // Chat: as in a chat completion (checked the same way), plus add_generation_prompt (default true).
    nlohmann::ordered_json messages, tools, chat_template_kwargs;
    bool add_generation_prompt = true;
};
TokenizeRequest parse_tokenize(std::string_view body);

// POST /detokenize: {"tokens": [ids]} (vLLM's and llama-server's shape alike). Ids must be in [0, 2^31); the server
// checks them against the vocabulary.
struct DetokenizeRequest {
    std::string model;
    std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize(std::string_view body);

constexpr size_t kMaxEmbeddingInputs = 2048;  // as OpenAI

// POST /v1/embeddings: `input` a string, a list of strings, a list of token ids or a list of such lists (at most
// kMaxEmbeddingInputs inputs, none empty); encoding_format "float" (default) or "base64"; dimensions, checked by the
// server against the model's hidden size.
struct EmbeddingRequest {
    std::string model;
    std::vector<std::string> texts;                // the inputs as text, or ...
    std::vector<std::vector<int32_t>> token_ids;   // ... as token ids
    bool base64 = false;
    std::optional<int64_t> dimensions;
};
EmbeddingRequest parse_embeddings(std::string_view body);

}  // namespace tracelm::serve
