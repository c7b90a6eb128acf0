// OpenAI's response shapes, field by field, against hand-written expected JSON.
#include <gtest/gtest.h>

#include <cmath>

#include "serve/openai_response.h"
#include "support/qwen3_tokenizer.h"

namespace tracelm::serve {
namespace {

using nlohmann::json;

using testing::qwen3_tokenizer;

const ResponseMeta kMeta{"chatcmpl-1", 1700000000, "smol"};

TEST(OpenAIResponse, AChatCompletionHasOpenAIsShape) {
    const json got = response_body(Endpoint::ChatCompletions, kMeta, {{"Hi there", Finish::Length, nullptr}}, {5, 2});
    const json want = json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000,
        "model": "smol", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there"},
        "logprobs": null, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})");
    EXPECT_EQ(got, want);
}

TEST(OpenAIResponse, ATextCompletionHasOpenAIsShape) {
    const json got = response_body(Endpoint::Completions, kMeta, {{"abc", Finish::Stop, nullptr}}, {1, 3});
    const json want = json::parse(R"({"id": "chatcmpl-1", "object": "text_completion", "created": 1700000000,
        "model": "smol", "choices": [{"index": 0, "text": "abc", "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}})");
    EXPECT_EQ(got, want);
}

// n > 1 and lists of prompts: one choice per entry, indexed in order, each with its own finish.
TEST(OpenAIResponse, SeveralChoicesAreIndexedInOrder) {
    const json got = response_body(Endpoint::Completions, kMeta,
                                   {{"abc", Finish::Stop, nullptr}, {"de", Finish::Length, nullptr}}, {2, 5});
    const json want = json::parse(R"({"id": "chatcmpl-1", "object": "text_completion", "created": 1700000000,
        "model": "smol", "choices": [{"index": 0, "text": "abc", "logprobs": null, "finish_reason": "stop"},
        {"index": 1, "text": "de", "logprobs": null, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}})");
    EXPECT_EQ(got, want);
    EXPECT_EQ(chunk(Endpoint::ChatCompletions, kMeta, 3, "x", Finish::None, nullptr),
              json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                  "model": "smol", "choices": [{"index": 3, "delta": {"content": "x"}, "logprobs": null,
                  "finish_reason": null}]})"));
}

TEST(OpenAIResponse, StreamedChunksAndTheUsageChunkHaveOpenAIsShape) {
    EXPECT_EQ(chunk(Endpoint::ChatCompletions, kMeta, 0, "", Finish::None, nullptr, true),
              json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                  "model": "smol", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                  "logprobs": null, "finish_reason": null}]})"));
    EXPECT_EQ(chunk(Endpoint::ChatCompletions, kMeta, 0, "x", Finish::Stop, nullptr),
              json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                  "model": "smol", "choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": null,
                  "finish_reason": "stop"}]})"));
    EXPECT_EQ(chunk(Endpoint::Completions, kMeta, 0, "y", Finish::None, nullptr),
              json::parse(R"({"id": "chatcmpl-1", "object": "text_completion", "created": 1700000000,
                  "model": "smol", "choices": [{"index": 0, "text": "y", "logprobs": null, "finish_reason": null}]})"));
    EXPECT_EQ(usage_chunk(Endpoint::ChatCompletions, kMeta, {4, 6}),
              json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                  "model": "smol", "choices": [],
                  "usage": {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}})"));
}

TEST(OpenAIResponse, ChatLogprobsHaveOpenAIsShapeWithBytes) {
    const int32_t hello = *qwen3_tokenizer().token_id("Hello"), hi = *qwen3_tokenizer().token_id("Hi");
    const std::vector<sampling::TokenLogprobs> lps = {{hello, -0.25f, {{hello, -0.25f}, {hi, -1.5f}}}, {hi, -INFINITY, {}}};
    const json got = logprobs_json(Endpoint::ChatCompletions, qwen3_tokenizer(), lps);
    const json want = json::parse(R"({"content": [
        {"token": "Hello", "logprob": -0.25, "bytes": [72, 101, 108, 108, 111], "top_logprobs": [
            {"token": "Hello", "logprob": -0.25, "bytes": [72, 101, 108, 108, 111]},
            {"token": "Hi", "logprob": -1.5, "bytes": [72, 105]}]},
        {"token": "Hi", "logprob": -9999.0, "bytes": [72, 105], "top_logprobs": []}]})");
    EXPECT_EQ(got, want);
}

TEST(OpenAIResponse, CompletionLogprobsShowAPartialCharacterAsUfffdWithItsBytes) {
    // The first byte of "你" (E4 BD A0) alone is not text: its token is U+FFFD, its bytes exact.
    const int32_t part = *qwen3_tokenizer().token_id("\xE4"), a = *qwen3_tokenizer().token_id("a");
    const std::vector<sampling::TokenLogprobs> lps = {{a, -0.5f, {{a, -0.5f}, {part, -2.0f}}}, {part, -1.0f, {}}};
    const json got = logprobs_json(Endpoint::Completions, qwen3_tokenizer(), lps, {0, 1});
    const json want = json::parse(R"({"tokens": ["a", "\ufffd"], "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{"a": -0.5, "\ufffd": -2.0}, {}], "text_offset": [0, 1]})");
    EXPECT_EQ(got, want);
    const json chat = logprobs_json(Endpoint::ChatCompletions, qwen3_tokenizer(), {{part, -1.0f, {}}});
    EXPECT_EQ(chat["content"][0]["bytes"], json::array({0xE4}));
}

TEST(OpenAIResponse, ErrorBodiesAndSseEventsHaveOpenAIsShape) {
    EXPECT_EQ(error_body(ApiError(400, "bad top_p", "invalid_request_error", "top_p", "invalid_value")),
              json::parse(R"({"error": {"message": "bad top_p", "type": "invalid_request_error", "param": "top_p",
                  "code": "invalid_value"}})"));
    EXPECT_EQ(error_body(ApiError(400, "no JSON", "invalid_request_error")),
              json::parse(R"({"error": {"message": "no JSON", "type": "invalid_request_error", "param": null,
                  "code": null}})"));
    EXPECT_EQ(sse(json{{"a", 1}}), "data: {\"a\":1}\n\n");
    EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
    EXPECT_EQ(dump(json("\xE4")), "\"\xEF\xBF\xBD\"");  // invalid UTF-8 is replaced, never thrown
    EXPECT_STREQ(finish_reason(Finish::Stop), "stop");
    EXPECT_STREQ(finish_reason(Finish::Length), "length");
}

}  // namespace
}  // namespace tracelm::serve
