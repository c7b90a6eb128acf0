// Parsing and validation of OpenAI request bodies: exact field values, and every invalid value answered with a 400
// that names its parameter.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "serve/openai_request.h"

namespace tracelm::serve {
namespace {

OpenAIRequest chat(const std::string& extra) {
    return parse_request(Endpoint::ChatCompletions,
                         R"({"model": "m", "messages": [{"role": "user", "content": "hi"}])" + extra + "}");
}

OpenAIRequest completion(const std::string& fields) { return parse_request(Endpoint::Completions, "{" + fields + "}"); }

// The ApiError a body gives (status, param, code), or a failure when it parses.
ApiError error_of(Endpoint endpoint, const std::string& body) {
    try {
        parse_request(endpoint, body);
    } catch (const ApiError& e) {
        return e;
    }
    ADD_FAILURE() << "no error for " << body;
    return ApiError(0, "", "");
}

void expect_param_error(const std::string& extra, const std::string& param, const std::string& in_message = "") {
    const ApiError e =
        error_of(Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "hi"}])" + extra + "}");
    EXPECT_EQ(e.status, 400) << extra;
    EXPECT_EQ(e.type, "invalid_request_error") << extra;
    EXPECT_EQ(e.param, param) << extra << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos)
        << "message should name the parameter: " << e.what();
    if (!in_message.empty()) {
        EXPECT_NE(std::string(e.what()).find(in_message), std::string::npos) << e.what();
    }
}

TEST(OpenAIRequest, AMinimalChatRequestGetsGreedyDefaults) {
    const OpenAIRequest r = chat("");
    EXPECT_EQ(r.endpoint, Endpoint::ChatCompletions);
    EXPECT_EQ(r.model, "m");
    ASSERT_EQ(r.messages.size(), 1u);
    EXPECT_EQ(r.messages[0]["role"], "user");
    EXPECT_EQ(r.messages[0]["content"], "hi");
    EXPECT_TRUE(r.chat_template_kwargs.empty());
    EXPECT_FALSE(r.stream);
    EXPECT_FALSE(r.include_usage);
    EXPECT_FALSE(r.max_tokens.has_value());
    EXPECT_TRUE(r.stop.empty());
    EXPECT_FALSE(r.ignore_eos);
    EXPECT_EQ(r.sampling.temperature, 0.0);  // tracelm's default: greedy
    EXPECT_EQ(r.sampling.top_p, 1.0);
    EXPECT_EQ(r.sampling.top_k, 0);
    EXPECT_FALSE(r.sampling.seed.has_value());
    EXPECT_FALSE(r.sampling.logprobs.has_value());
}

TEST(OpenAIRequest, EveryFieldIsRead) {
    const OpenAIRequest r = chat(R"(, "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 7,
        "stop": ["a", "bc"], "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.25,
        "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 1234, "logprobs": true, "top_logprobs": 3,
        "n": 1, "ignore_eos": true, "user": "someone", "tools": [])");
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.max_tokens, 7);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
    EXPECT_EQ(r.sampling.temperature, 0.5);
    EXPECT_EQ(r.sampling.top_p, 0.9);
    EXPECT_EQ(r.sampling.top_k, 40);
    EXPECT_EQ(r.sampling.min_p, 0.05);
    EXPECT_EQ(r.sampling.presence_penalty, 0.25);
    EXPECT_EQ(r.sampling.frequency_penalty, -0.5);
    EXPECT_EQ(r.sampling.repeat_penalty, 1.1);
    EXPECT_EQ(r.sampling.seed, 1234u);
    EXPECT_EQ(r.sampling.logprobs, 3);
    EXPECT_TRUE(r.ignore_eos);
}

TEST(OpenAIRequest, NullMeansNotGiven) {
    const OpenAIRequest r = chat(R"(, "temperature": null, "max_tokens": null, "stop": null, "seed": null)");
    EXPECT_EQ(r.sampling.temperature, 0.0);
    EXPECT_FALSE(r.max_tokens.has_value());
    EXPECT_TRUE(r.stop.empty());
    EXPECT_FALSE(r.sampling.seed.has_value());
}

TEST(OpenAIRequest, MaxCompletionTokensAStopStringAndSentinelValuesAreRead) {
    const OpenAIRequest r = chat(R"(, "max_completion_tokens": 9, "stop": "END")");
    EXPECT_EQ(r.max_tokens, 9);
    EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
    EXPECT_EQ(chat(R"(, "logprobs": true)").sampling.logprobs, 0);  // the chosen token only
    EXPECT_FALSE(chat(R"(, "logprobs": false)").sampling.logprobs.has_value());
    EXPECT_EQ(chat(R"(, "top_k": -1)").sampling.top_k, 0);         // vLLM's "off"
    EXPECT_EQ(chat(R"(, "seed": -1)").sampling.seed, UINT64_MAX);  // the bits of a negative seed
}

// Messages reach the chat template as sent, in the client's key order: content parts stay a list (the template
// decides how to join them), extra fields pass through; developer becomes system and a null content "".
TEST(OpenAIRequest, MessagesPassThroughWithDeveloperAsSystemAndNullContentEmpty) {
    const OpenAIRequest r = parse_request(Endpoint::ChatCompletions, R"({"messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": null, "reasoning_content": "hm", "zeta": 1, "alpha": 2},
        {"role": "user", "content": "three", "name": "bob"}]})");
    ASSERT_EQ(r.messages.size(), 4u);
    EXPECT_EQ(r.messages[0]["role"], "system");
    EXPECT_EQ(r.messages[0]["content"], "be brief");
    EXPECT_EQ(r.messages[1]["content"].dump(), R"([{"type":"text","text":"one"},{"type":"text","text":"two"}])");
    EXPECT_EQ(r.messages[2].dump(), R"({"role":"assistant","content":"","reasoning_content":"hm","zeta":1,"alpha":2})");
    EXPECT_EQ(r.messages[3].dump(), R"({"role":"user","content":"three","name":"bob"})");
}

TEST(OpenAIRequest, ChatTemplateKwargsAreAnObjectThatCannotReplaceTheRequestsOwnVariables) {
    const OpenAIRequest r = chat(R"(, "chat_template_kwargs": {"enable_thinking": false, "b": [1], "a": null})");
    EXPECT_EQ(r.chat_template_kwargs.dump(), R"({"enable_thinking":false,"b":[1],"a":null})");
    EXPECT_TRUE(chat(R"(, "chat_template_kwargs": null)").chat_template_kwargs.empty());
    expect_param_error(R"(, "chat_template_kwargs": "enable_thinking")", "chat_template_kwargs", "an object");
    expect_param_error(R"(, "chat_template_kwargs": [1])", "chat_template_kwargs", "an object");
    expect_param_error(R"(, "chat_template_kwargs": {"messages": []})", "chat_template_kwargs.messages");
    expect_param_error(R"(, "chat_template_kwargs": {"tools": []})", "chat_template_kwargs.tools");
    expect_param_error(R"(, "chat_template_kwargs": {"add_generation_prompt": false})",
                       "chat_template_kwargs.add_generation_prompt");
}

// vLLM's add_generation_prompt and continue_final_message: continuing needs the assistant's message last and
// opens no new turn (add_generation_prompt false unless given, and refused when given true).
TEST(OpenAIRequest, ContinuingTheFinalMessageNeedsTheAssistantsMessageAndNoGenerationPrompt) {
    EXPECT_TRUE(chat("").add_generation_prompt);
    EXPECT_FALSE(chat("").continue_final_message);
    EXPECT_FALSE(chat(R"(, "add_generation_prompt": false)").add_generation_prompt);
    const std::string last_assistant = R"({"messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello"}], "continue_final_message": true)";
    const OpenAIRequest r = parse_request(Endpoint::ChatCompletions, last_assistant + "}");
    EXPECT_TRUE(r.continue_final_message);
    EXPECT_FALSE(r.add_generation_prompt);
    EXPECT_FALSE(parse_request(Endpoint::ChatCompletions, last_assistant + R"(, "add_generation_prompt": false})")
                     .add_generation_prompt);
    const ApiError both =
        error_of(Endpoint::ChatCompletions, last_assistant + R"(, "add_generation_prompt": true})");
    EXPECT_EQ(both.param, "continue_final_message");
    EXPECT_NE(std::string(both.what()).find("add_generation_prompt"), std::string::npos) << both.what();
    expect_param_error(R"(, "continue_final_message": true)", "continue_final_message", "assistant");
    expect_param_error(R"(, "continue_final_message": 1)", "continue_final_message", "a boolean");
    expect_param_error(R"(, "add_generation_prompt": "no")", "add_generation_prompt", "a boolean");
}

// OpenAI's answer to an argument it does not know: a 400 naming it. Null is "not given"; user, metadata and
// store: false only label a request.
TEST(OpenAIRequest, UnknownFieldsAreRefusedByName) {
    for (const char* name : {"some_future_field", "audio", "modalities", "prediction", "reasoning_effort",
                             "web_search_options", "service_tier", "echo", "best_of", "suffix", "prompt"}) {
        const ApiError e =
            error_of(Endpoint::ChatCompletions, std::string(R"({"messages": [{"role": "user", "content": "hi"}], ")") +
                                                    name + R"(": {"x": 1}})");
        EXPECT_EQ(e.status, 400) << name;
        EXPECT_EQ(e.param, name);
        EXPECT_EQ(std::string(e.what()), std::string("Unrecognized request argument supplied: ") + name);
        EXPECT_EQ(e.code, "");
    }
    // Chat's own fields are unknown to /v1/completions.
    for (const char* name : {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                             "parallel_tool_calls", "chat_template_kwargs", "continue_final_message",
                             "add_generation_prompt", "functions"}) {
        const ApiError e = error_of(Endpoint::Completions, std::string(R"({"prompt": "x", ")") + name + R"(": 1})");
        EXPECT_EQ(e.param, name);
        EXPECT_EQ(std::string(e.what()), std::string("Unrecognized request argument supplied: ") + name);
    }
    const ApiError nested = error_of(
        Endpoint::Completions, R"({"prompt": "x", "stream": true, "stream_options": {"include_obfuscation": false}})");
    EXPECT_EQ(nested.param, "stream_options.include_obfuscation");
    EXPECT_NO_THROW(chat(R"(, "some_future_field": null, "stream": true, "stream_options": {"x": null})"));
    EXPECT_NO_THROW(chat(R"(, "user": "u-1", "metadata": {"k": "v"}, "store": false)"));
    EXPECT_NO_THROW(completion(R"("prompt": "x", "user": "u-1", "metadata": {}, "store": false)"));
    expect_param_error(R"(, "store": true)", "store", "keeps no completions");
    expect_param_error(R"(, "user": 5)", "user", "a string");
    expect_param_error(R"(, "metadata": [1])", "metadata", "an object");
}

// OpenAI's ranges: presence_penalty and frequency_penalty in [-2, 2].
TEST(OpenAIRequest, PenaltiesOutsideOpenAIsRangeAreRefused) {
    EXPECT_EQ(chat(R"(, "presence_penalty": 2, "frequency_penalty": -2)").sampling.presence_penalty, 2.0);
    EXPECT_EQ(chat(R"(, "presence_penalty": 2, "frequency_penalty": -2)").sampling.frequency_penalty, -2.0);
    for (const char* param : {"presence_penalty", "frequency_penalty"}) {
        for (const char* value : {"2.01", "-2.5", "1e39"}) {
            expect_param_error(std::string(", \"") + param + "\": " + value, param, "must be in [-2, 2]");
        }
    }
}

TEST(OpenAIRequest, CompletionPromptsAreTextOrTokenIds) {
    const auto one = [](const std::string& fields) {
        const OpenAIRequest r = completion(fields);
        EXPECT_EQ(r.prompts.size(), 1u) << fields;
        return r.prompts.at(0);
    };
    EXPECT_EQ(one(R"("prompt": "hello")").text, "hello");
    EXPECT_EQ(one(R"("prompt": ["hello"])").text, "hello");
    EXPECT_EQ(one(R"("prompt": [1, 2, 3])").ids, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(one(R"("prompt": [[4, 5]])").ids, (std::vector<int32_t>{4, 5}));
    EXPECT_EQ(completion(R"("prompt": "x", "logprobs": 5)").sampling.logprobs, 5);
    EXPECT_EQ(completion(R"("prompt": "x", "logprobs": 0)").sampling.logprobs, 0);
    EXPECT_EQ(completion(R"("prompt": "x", "max_tokens": 3)").max_tokens, 3);
}

// A list of prompts (strings and id lists), each with n choices: at most kMaxChoices choices in all.
TEST(OpenAIRequest, CompletionsTakeAListOfPromptsAndNChoicesOfEach) {
    const OpenAIRequest r = completion(R"("prompt": ["a", [7, 8], "b"], "n": 3)");
    ASSERT_EQ(r.prompts.size(), 3u);
    EXPECT_EQ(r.prompts[0].text, "a");
    EXPECT_FALSE(r.prompts[0].ids);
    EXPECT_EQ(r.prompts[1].ids, (std::vector<int32_t>{7, 8}));
    EXPECT_EQ(r.prompts[2].text, "b");
    EXPECT_EQ(r.n, 3);
    EXPECT_EQ(completion(R"("prompt": "a")").n, 1);
    EXPECT_EQ(chat(R"(, "n": 128)").n, 128);
    const auto param_of = [](const std::string& fields) { return error_of(Endpoint::Completions, "{" + fields + "}"); };
    EXPECT_EQ(param_of(R"("prompt": ["a", "b"], "n": 65)").param, "n");  // 130 choices
    EXPECT_EQ(param_of(R"("prompt": ["a", 3])").param, "prompt");
    EXPECT_EQ(param_of(R"("prompt": ["a", [1, "x"]])").param, "prompt");
    std::string many = R"("prompt": [)";
    for (int i = 0; i <= kMaxChoices; ++i) many.append(i == 0 ? "\"p\"" : ", \"p\"");
    EXPECT_EQ(param_of(many + "]").param, "prompt");
}

// echo prepends the prompt (with logprobs, scored too); best_of only as n; no suffix.
TEST(OpenAIRequest, CompletionsEchoBestOfAndSuffix) {
    EXPECT_FALSE(completion(R"("prompt": "x")").echo);
    EXPECT_TRUE(completion(R"("prompt": "x", "echo": true, "best_of": 1)").echo);
    EXPECT_EQ(completion(R"("prompt": "x", "n": 2, "best_of": 2)").n, 2);
    const auto param_of = [](const std::string& fields) { return error_of(Endpoint::Completions, "{" + fields + "}"); };
    EXPECT_EQ(completion(R"("prompt": "x", "echo": true, "logprobs": 2)").sampling.logprobs, 2);  // prompt scored
    EXPECT_EQ(param_of(R"("prompt": "x", "echo": "yes")").param, "echo");
    const ApiError best_of = param_of(R"("prompt": "x", "best_of": 2)");
    EXPECT_EQ(best_of.param, "best_of");
    EXPECT_NE(std::string(best_of.what()).find("must equal 'n'"), std::string::npos) << best_of.what();
    const ApiError suffix = param_of(R"("prompt": "x", "suffix": "}")");
    EXPECT_EQ(suffix.param, "suffix");
    EXPECT_NE(std::string(suffix.what()).find("fill-in-the-middle"), std::string::npos) << suffix.what();
}

TEST(OpenAIRequest, MalformedBodiesAreA400WithoutAParameter) {
    for (const char* body : {"", "{", "not json", "{\"messages\": [}", "[1, 2]", "\"text\"", "null"}) {
        const ApiError e = error_of(Endpoint::ChatCompletions, body);
        EXPECT_EQ(e.status, 400) << body;
        EXPECT_EQ(e.type, "invalid_request_error") << body;
        EXPECT_EQ(e.param, "") << body;
    }
    // Deep nesting is refused while parsing, before anything recurses over it.
    const std::string deep = "{\"x\": " + std::string(10000, '[') + std::string(10000, ']') + "}";
    EXPECT_EQ(error_of(Endpoint::ChatCompletions, deep).status, 400);
}

TEST(OpenAIRequest, InvalidValuesNameTheirParameter) {
    expect_param_error(R"(, "temperature": -1)", "temperature", ">= 0");
    expect_param_error(R"(, "temperature": "hot")", "temperature", "a number");
    expect_param_error(R"(, "top_p": 1.5)", "top_p", "(0, 1]");
    expect_param_error(R"(, "top_p": 0)", "top_p");
    expect_param_error(R"(, "top_k": -2)", "top_k");
    expect_param_error(R"(, "top_k": 1.5)", "top_k", "an integer");
    expect_param_error(R"(, "min_p": 2)", "min_p", "[0, 1]");
    expect_param_error(R"(, "repetition_penalty": 0)", "repetition_penalty", "> 0");
    expect_param_error(R"(, "presence_penalty": 1e39)", "presence_penalty", "[-2, 2]");
    expect_param_error(R"(, "frequency_penalty": "x")", "frequency_penalty");
    expect_param_error(R"(, "seed": 0.5)", "seed", "an integer");
    expect_param_error(R"(, "max_tokens": 0)", "max_tokens", "at least 1");
    expect_param_error(R"(, "max_tokens": "5")", "max_tokens");
    expect_param_error(R"(, "max_completion_tokens": -3)", "max_completion_tokens");
    expect_param_error(R"(, "max_completion_tokens": 3, "max_tokens": 3)", "max_tokens", "max_completion_tokens");
    expect_param_error(R"(, "n": 0)", "n", "[1, 128]");
    expect_param_error(R"(, "n": 129)", "n", "[1, 128]");
    expect_param_error(R"(, "n": 1.5)", "n", "an integer");
    expect_param_error(R"(, "stream": "yes")", "stream", "a boolean");
    expect_param_error(R"(, "stream_options": {"include_usage": true})", "stream_options");
    expect_param_error(R"(, "stream": true, "stream_options": {"include_usage": 1})", "stream_options.include_usage");
    expect_param_error(R"(, "stop": ["a", "b", "c", "d", "e"])", "stop", "at most 4");
    expect_param_error(R"(, "stop": [""])", "stop", "empty");
    expect_param_error(R"(, "stop": 3)", "stop");
    expect_param_error(R"(, "stop": ["a", 3])", "stop");
    expect_param_error(R"(, "logprobs": 1)", "logprobs", "a boolean");
    expect_param_error(R"(, "logprobs": true, "top_logprobs": 21)", "top_logprobs", "[0, 20]");
    expect_param_error(R"(, "logprobs": true, "top_logprobs": -1)", "top_logprobs");
    expect_param_error(R"(, "top_logprobs": 2)", "top_logprobs", "logprobs");
    expect_param_error(R"(, "ignore_eos": 1)", "ignore_eos");
    expect_param_error(R"(, "model": 5)", "model");
}

TEST(OpenAIRequest, InvalidMessagesAndPromptsNameTheirParameter) {
    const auto param_of = [](Endpoint ep, const std::string& body) { return error_of(ep, body).param; };
    const Endpoint c = Endpoint::ChatCompletions, p = Endpoint::Completions;
    EXPECT_EQ(param_of(c, "{}"), "messages");
    EXPECT_EQ(error_of(c, "{}").code, "missing_required_parameter");
    EXPECT_EQ(param_of(c, R"({"messages": []})"), "messages");
    EXPECT_EQ(param_of(c, R"({"messages": "hi"})"), "messages");
    EXPECT_EQ(param_of(c, R"({"messages": [5]})"), "messages[0]");
    EXPECT_EQ(param_of(c, R"({"messages": [{"content": "x"}]})"), "messages[0].role");
    EXPECT_EQ(param_of(c, R"({"messages": [{"role": "function", "content": "x"}]})"), "messages[0].role");
    EXPECT_EQ(param_of(c, R"({"messages": [{"role": "user"}]})"), "messages[0].content");
    EXPECT_EQ(param_of(c, R"({"messages": [{"role": "user", "content": 3}]})"), "messages[0].content");
    EXPECT_EQ(param_of(c, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
              "messages[0].content[0].type");
    EXPECT_EQ(param_of(c, R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})"),
              "messages[0].content[0].text");
    EXPECT_EQ(param_of(p, "{}"), "prompt");
    EXPECT_EQ(param_of(p, R"({"prompt": 5})"), "prompt");
    EXPECT_EQ(param_of(p, R"({"prompt": []})"), "prompt");
    EXPECT_EQ(param_of(p, R"({"prompt": ["a", 5]})"), "prompt");
    EXPECT_EQ(param_of(p, R"({"prompt": [1, -2]})"), "prompt");
    EXPECT_EQ(param_of(p, R"({"prompt": [1, "x"]})"), "prompt");
    EXPECT_EQ(param_of(p, R"({"prompt": [[1], [-2]]})"), "prompt");
    EXPECT_EQ(param_of(p, R"({"prompt": [[1], []]})"), "prompt");
    EXPECT_EQ(param_of(p, R"({"prompt": "x", "logprobs": 21})"), "logprobs");
    EXPECT_EQ(param_of(p, R"({"prompt": "x", "logprobs": true})"), "logprobs");
}

TEST(OpenAIRequest, LogitBiasIsReadInOrderAndCheckedByName) {
    const OpenAIRequest r = chat(R"(, "logit_bias": {"50256": -100, "7": 2.5, "0": 100})");
    const std::vector<std::pair<int32_t, float>> want = {{50256, -100.0f}, {7, 2.5f}, {0, 100.0f}};
    EXPECT_EQ(r.logit_bias, want);
    EXPECT_TRUE(chat("").logit_bias.empty());
    expect_param_error(R"(, "logit_bias": {"abc": 1})", "logit_bias", "token ids");
    expect_param_error(R"(, "logit_bias": {"-1": 1})", "logit_bias", "token ids");
    expect_param_error(R"(, "logit_bias": {"1.5": 1})", "logit_bias", "token ids");
    expect_param_error(R"(, "logit_bias": {"3": 100.5})", "logit_bias", "[-100, 100]");
    expect_param_error(R"(, "logit_bias": {"3": "x"})", "logit_bias", "[-100, 100]");
    expect_param_error(R"(, "logit_bias": [1])", "logit_bias");
    std::string many = R"(, "logit_bias": {)";
    for (int i = 0; i < 301; ++i) {
        many += i ? ", \"" : "\"";
        many += std::to_string(i);
        many += "\": 1";
    }
    expect_param_error(many + "}", "logit_bias", "at most 300");
}

TEST(OpenAIRequest, ResponseFormatAndExtensionFieldsBecomeOneConstraint) {
    EXPECT_FALSE(chat(R"(, "response_format": {"type": "text"})").constraint);
    const OpenAIRequest obj = chat(R"(, "response_format": {"type": "json_object"})");
    ASSERT_TRUE(obj.constraint);
    EXPECT_EQ(obj.constraint->kind, grammar::Kind::JsonObject);
    const OpenAIRequest js = chat(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "n",
        "strict": true, "schema": {"type": "integer"}}})");
    ASSERT_TRUE(js.constraint);
    EXPECT_EQ(js.constraint->kind, grammar::Kind::JsonSchema);
    EXPECT_EQ(nlohmann::json::parse(js.constraint->text), nlohmann::json::parse(R"({"type": "integer"})"));
    EXPECT_EQ(js.constraint_param, "response_format.json_schema.schema");
    const OpenAIRequest re = chat(R"(, "guided_regex": "[0-9]+", "guided_decoding_backend": "xgrammar")");
    ASSERT_TRUE(re.constraint);
    EXPECT_EQ(re.constraint->kind, grammar::Kind::Regex);
    EXPECT_EQ(re.constraint->text, "[0-9]+");
    EXPECT_EQ(chat(R"(, "grammar": "root ::= \"a\"")").constraint->kind, grammar::Kind::Ebnf);
    EXPECT_EQ(chat(R"(, "guided_json": "{\"type\": \"null\"}")").constraint->text, R"({"type": "null"})");
    EXPECT_EQ(chat(R"(, "json_schema": {"type": "null"})").constraint_param, "json_schema");

    expect_param_error(R"(, "response_format": {"type": "bogus"})", "response_format.type", "bogus");
    expect_param_error(R"(, "response_format": {})", "response_format.type");
    expect_param_error(R"(, "response_format": "json")", "response_format");
    expect_param_error(R"(, "response_format": {"type": "json_schema"})", "response_format.json_schema");
    expect_param_error(R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}})",
                       "response_format.json_schema.name");
    expect_param_error(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": 3}})",
                       "response_format.json_schema.schema");
    expect_param_error(R"(, "response_format": {"type": "json_object"}, "guided_regex": "a")", "guided_regex",
                       "one constraint");
    expect_param_error(R"(, "guided_choice": ["a", "b"])", "guided_choice", "not supported");
    expect_param_error(R"(, "structured_outputs": {"regex": "a"})", "structured_outputs", "not supported");
    expect_param_error(R"(, "guided_decoding_backend": "outlines")", "guided_decoding_backend");
    expect_param_error(R"(, "guided_regex": 5)", "guided_regex");
}

constexpr const char* kTools = R"(, "tools": [{"type": "function", "function": {"name": "get_weather",
    "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "ping"}}])";

TEST(OpenAIRequest, ToolsToolChoiceAndToolMessagesAreRead) {
    const OpenAIRequest r = chat(std::string(kTools) + R"(, "tool_choice": "auto", "parallel_tool_calls": false)");
    ASSERT_TRUE(r.tools.is_array());
    ASSERT_EQ(r.tools.size(), 2u);
    EXPECT_EQ(r.tools[0]["function"]["name"], "get_weather");
    EXPECT_EQ(r.tool_choice, ToolChoice::Auto);
    EXPECT_FALSE(r.parallel_tool_calls);
    EXPECT_TRUE(chat("").tools.is_null());
    EXPECT_TRUE(chat(R"(, "tools": [])").tools.is_null());
    EXPECT_EQ(chat(std::string(kTools) + R"(, "tool_choice": "none")").tool_choice, ToolChoice::None);
    EXPECT_EQ(chat(std::string(kTools) + R"(, "tool_choice": "required")").tool_choice, ToolChoice::Required);
    const OpenAIRequest named =
        chat(std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "ping"}})");
    EXPECT_EQ(named.tool_choice, ToolChoice::Named);
    EXPECT_EQ(named.tool_choice_name, "ping");

    // An agent loop's second request: the assistant's call (arguments as JSON text) and the tool's result.
    const OpenAIRequest loop = parse_request(Endpoint::ChatCompletions, std::string(R"({"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}])") + kTools + "}");
    ASSERT_EQ(loop.messages.size(), 3u);
    EXPECT_EQ(loop.messages[1]["content"], "");
    EXPECT_EQ(loop.messages[1]["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
    EXPECT_EQ(loop.messages[2]["role"], "tool");
    EXPECT_EQ(loop.messages[2]["tool_call_id"], "call_1");
}

TEST(OpenAIRequest, EveryBadToolFieldIsA400NamingIt) {
    const std::string t = kTools;
    expect_param_error(R"(, "tools": {})", "tools");
    expect_param_error(R"(, "tools": [5])", "tools[0]");
    expect_param_error(R"(, "tools": [{"type": "code_interpreter"}])", "tools[0].type");
    expect_param_error(R"(, "tools": [{"type": "function"}])", "tools[0].function");
    expect_param_error(R"(, "tools": [{"type": "function", "function": {}}])", "tools[0].function.name");
    expect_param_error(R"(, "tools": [{"type": "function", "function": {"name": "a b"}}])", "tools[0].function.name");
    expect_param_error(R"(, "tools": [{"type": "function", "function": {"name": ")" + std::string(65, 'x') + R"("}}])",
                       "tools[0].function.name");
    expect_param_error(R"(, "tools": [{"type": "function", "function": {"name": "f"}},
                                      {"type": "function", "function": {"name": "f"}}])",
                       "tools[1].function.name", "twice");
    expect_param_error(R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])",
                       "tools[0].function.parameters");
    expect_param_error(R"(, "tools": [{"type": "function", "function": {"name": "f", "description": 1}}])",
                       "tools[0].function.description");
    expect_param_error(R"(, "tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}])",
                       "tools[0].function.strict");
    expect_param_error(t + R"(, "tool_choice": "sometimes")", "tool_choice");
    expect_param_error(t + R"(, "tool_choice": 1)", "tool_choice");
    expect_param_error(R"(, "tool_choice": "required")", "tool_choice", "tools");
    expect_param_error(t + R"(, "tool_choice": {"type": "x"})", "tool_choice.type");
    expect_param_error(t + R"(, "tool_choice": {"type": "function"})", "tool_choice.function");
    expect_param_error(t + R"(, "tool_choice": {"type": "function", "function": {}})", "tool_choice.function.name");
    expect_param_error(t + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})",
                       "tool_choice.function.name", "nope");
    expect_param_error(t + R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls");
    expect_param_error(R"(, "functions": [])", "functions");
    expect_param_error(R"(, "function_call": "auto")", "function_call");
}

TEST(OpenAIRequest, EveryBadToolMessageFieldIsA400NamingIt) {
    const auto param_of = [](const std::string& message) {
        return error_of(Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "hi"}, )" + message +
                                                       "]}").param;
    };
    EXPECT_EQ(param_of(R"({"role": "tool", "content": "x"})"), "messages[1].tool_call_id");
    EXPECT_EQ(param_of(R"({"role": "tool", "tool_call_id": 3, "content": "x"})"), "messages[1].tool_call_id");
    EXPECT_EQ(param_of(R"({"role": "tool", "tool_call_id": "c"})"), "messages[1].content");
    const std::string a = R"({"role": "assistant", "tool_calls": )";
    EXPECT_EQ(param_of(a + "{}}"), "messages[1].tool_calls");
    EXPECT_EQ(param_of(a + "[1]}"), "messages[1].tool_calls[0]");
    EXPECT_EQ(param_of(a + R"([{"type": "x", "function": {"name": "f", "arguments": "{}"}}]})"),
              "messages[1].tool_calls[0].type");
    EXPECT_EQ(param_of(a + R"([{"id": 1, "function": {"name": "f", "arguments": "{}"}}]})"),
              "messages[1].tool_calls[0].id");
    EXPECT_EQ(param_of(a + R"([{"type": "function"}]})"), "messages[1].tool_calls[0].function");
    EXPECT_EQ(param_of(a + R"([{"function": {"arguments": "{}"}}]})"), "messages[1].tool_calls[0].function.name");
    EXPECT_EQ(param_of(a + R"([{"function": {"name": "f", "arguments": {"a": 1}}}]})"),
              "messages[1].tool_calls[0].function.arguments");
    EXPECT_EQ(param_of(a + R"([{"function": {"name": "f", "arguments": "{not json"}}]})"),
              "messages[1].tool_calls[0].function.arguments");
}

}  // namespace
}  // namespace tracelm::serve
