// The HTTP server over loopback against a scripted stand-in for the scheduler (a Generator whose streams replay
// given updates): request mapping, response bodies and SSE, every error status, keep-alive comments and
// cancellation of requests whose client went away.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "serve/http_server.h"
#include "serve/openai_request.h"
#include "support/http_client.h"
#include "support/qwen3_tokenizer.h"
#include "support/test_support.h"
#include "support/tokenizer_goldens.h"

namespace tracelm::serve {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

using testing::qwen3_tokenizer;

// Replays `script` one update per next(); after it (or with `hang`, from the start) it only times out.
class ScriptedStream : public Stream {
   public:
    explicit ScriptedStream(std::vector<StreamUpdate> script) : script_(std::move(script)) {}
    StreamUpdate next(std::chrono::milliseconds timeout) override {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (cancelled) return {{}, {}, Finish::Cancelled, "", {}};
            if (i_ < script_.size()) return script_[i_++];
        }
        std::this_thread::sleep_for(timeout);
        return {};
    }
    void cancel() override { cancelled = true; }
    std::vector<float> embedding() override { return hidden; }
    std::atomic<bool> cancelled{false};
    std::vector<float> hidden;  // an embed request's

   private:
    std::mutex mu_;
    std::vector<StreamUpdate> script_;
    size_t i_ = 0;
};

// One update per token of `text`, then one that ends with `finish`.
std::vector<StreamUpdate> updates_of(const std::string& text, Finish finish = Finish::Stop) {
    std::vector<StreamUpdate> u;
    for (const int32_t id : qwen3_tokenizer().encode(text)) u.push_back({{id}, {}, Finish::None, "", {}});
    u.push_back({{}, {}, finish, finish == Finish::Error ? "boom" : "", {}});
    return u;
}

constexpr int64_t kContext = 64;

class HttpServerTest : public ::testing::Test {
   protected:
    void start(const std::string& api_key = "", bool ready = true, bool metrics_public = false) {
        HttpOptions o;
        o.host = "127.0.0.1";
        o.port = 0;
        o.api_key = api_key;
        o.metrics_public = metrics_public;
        o.model_id = "test-model";
        o.max_body_bytes = max_body_bytes_;
        o.poll = 20ms;
        o.write_timeout = write_timeout_;
        server_ = std::make_unique<HttpServer>(o);
        port_ = server_->bind();
        thread_ = std::thread([this] { server_->run(); });
        if (ready) make_ready();
    }
    // The model's chat template is Qwen3's, or `chat_template` when given (as serve's --chat-template).
    void make_ready(const std::string& chat_template = "") {
        ServedModel m{qwen3_tokenizer(),   ChatTemplate::for_tokenizer(qwen3_tokenizer(), chat_template), qwen3_tokenizer().end_of_generation_ids(),
                      context_, qwen3_tokenizer().vocab_size(), nullptr};
        m.tool_format = tools::detect_format(chat_template.empty() ? qwen3_tokenizer().chat_template() : chat_template);
        if (with_grammar_) m.grammar = std::make_shared<const grammar::Compiler>(qwen3_tokenizer(), qwen3_tokenizer().vocab_size());
        m.hidden_size = hidden_size_;
        Generator g;
        g.submit = [this](std::vector<GenerationRequest> rs) {
            // The scheduler's refusals (Engine::check_prompt): ids outside the vocabulary, a prompt that cannot fit;
            // all or none.
            for (const GenerationRequest& r : rs) {
                for (const int32_t id : r.prompt)
                    if (id < 0 || id >= qwen3_tokenizer().vocab_size())
                        throw RequestError("invalid token id " + std::to_string(id));
                if (static_cast<int64_t>(r.prompt.size()) + 1 > context_)
                    throw RequestError("prompt of " + std::to_string(r.prompt.size()) + " tokens does not fit");
            }
            std::vector<std::shared_ptr<Stream>> streams;
            std::lock_guard<std::mutex> lock(mu_);
            for (const GenerationRequest& r : rs) {
                submitted_.push_back(r);
                if (r.embed) {
                    // An embedding that tells the inputs apart: (prompt length, 1), before normalisation.
                    auto s = std::make_shared<ScriptedStream>(std::vector<StreamUpdate>{{{}, {}, Finish::Stop, "", {}}});
                    s->hidden = {static_cast<float>(r.prompt.size()), 1.0f};
                    streams.push_back(s);
                    continue;
                }
                last_ = std::make_shared<ScriptedStream>(script_);
                streams.push_back(last_);
            }
            return streams;
        };
        g.stats = [] {
            SchedulerStats s;
            s.running = 2;
            return s;
        };
        server_->set_ready(std::move(m), std::move(g));
    }
    void TearDown() override {
        if (server_) server_->stop();
        if (thread_.joinable()) thread_.join();
    }
    using Result = std::optional<testing::HttpResponse>;
    Result post(const std::string& path, const std::string& body,
                const std::map<std::string, std::string>& headers = {}) {
        return testing::http_request(port_, "POST", path, body, headers, 10s);
    }
    Result get(const std::string& path, const std::map<std::string, std::string>& headers = {}) {
        return testing::http_request(port_, "GET", path, "", headers, 10s);
    }
    // The JSON of each `data:` event of an SSE body ([DONE] as the string "[DONE]"); comments are skipped.
    static std::vector<json> events(const std::string& body) {
        std::vector<json> out;
        size_t pos = 0;
        while (pos < body.size()) {
            const size_t end = body.find("\n\n", pos);
            EXPECT_NE(end, std::string::npos) << "unterminated event";
            if (end == std::string::npos) break;
            const std::string ev = body.substr(pos, end - pos);
            pos = end + 2;
            if (ev.rfind(":", 0) == 0) continue;
            EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
            const std::string data = ev.substr(6);
            out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
        }
        return out;
    }
    static void expect_error(const Result& r, int status, const std::string& param = "") {
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, status) << r->body;
        const json e = json::parse(r->body).at("error");
        EXPECT_TRUE(e.at("message").is_string());
        EXPECT_TRUE(e.at("type").is_string());
        EXPECT_EQ(e.at("param"), param.empty() ? json(nullptr) : json(param)) << r->body;
        EXPECT_TRUE(e.contains("code"));
    }

    // What the server threads recorded, read under the lock.
    std::vector<GenerationRequest> submitted() {
        std::lock_guard<std::mutex> lock(mu_);
        return submitted_;
    }
    std::shared_ptr<ScriptedStream> last() {
        std::lock_guard<std::mutex> lock(mu_);
        return last_;
    }

    std::chrono::milliseconds write_timeout_ = 30s;
    size_t max_body_bytes_ = 4096;
    int64_t hidden_size_ = 2;  // 0: the model's files name a pooling other than last-token
    std::unique_ptr<HttpServer> server_;
    std::thread thread_;
    int port_ = 0;
    std::mutex mu_;
    std::vector<StreamUpdate> script_ = updates_of("Hello 世界 😀!");
    int64_t context_ = kContext;  // a tool-offering prompt needs more
    bool with_grammar_ = false;   // constrained decoding (compiling Qwen3's vocabulary takes a moment)
    std::vector<GenerationRequest> submitted_;
    std::shared_ptr<ScriptedStream> last_;
};

TEST_F(HttpServerTest, HealthIs503UntilReady) {
    start("", false);
    auto h = get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 503);
    expect_error(post("/v1/completions", R"({"prompt": "x"})"), 503);
    make_ready();
    h = get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    const auto m = get("/v1/models");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->status, 200);
    const json models = json::parse(m->body);
    EXPECT_EQ(models["object"], "list");
    ASSERT_EQ(models["data"].size(), 1u);
    EXPECT_EQ(models["data"][0]["id"], "test-model");
    EXPECT_EQ(models["data"][0]["object"], "model");
    const auto metrics = get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metrics->status, 200);
    EXPECT_NE(metrics->body.find("tracelm:num_requests_running{model_name=\"test-model\"} 2\n"), std::string::npos);
}

TEST_F(HttpServerTest, CompletionMapsTheRequestAndAnswers) {
    start();
    const auto r = post("/v1/completions", R"({"model": "test-model", "prompt": "Say hi", "max_tokens": 5,
                                              "temperature": 0.5, "seed": 9, "stop": ["zzz"]})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json body = json::parse(r->body);
    EXPECT_EQ(body["object"], "text_completion");
    EXPECT_EQ(body["model"], "test-model");
    EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
    EXPECT_EQ(body["choices"][0]["text"], "Hello 世界 😀!");
    EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
    const int64_t prompt_tokens = static_cast<int64_t>(qwen3_tokenizer().encode("Say hi").size());
    const int64_t completion_tokens = static_cast<int64_t>(qwen3_tokenizer().encode("Hello 世界 😀!").size());
    EXPECT_EQ(body["usage"]["prompt_tokens"], prompt_tokens);
    EXPECT_EQ(body["usage"]["completion_tokens"], completion_tokens);
    EXPECT_EQ(body["usage"]["total_tokens"], prompt_tokens + completion_tokens);

    ASSERT_EQ(submitted().size(), 1u);
    const GenerationRequest g = submitted().at(0);
    EXPECT_EQ(g.prompt, qwen3_tokenizer().encode("Say hi"));
    EXPECT_EQ(g.max_new_tokens, 5);
    EXPECT_EQ(g.stop_ids, qwen3_tokenizer().end_of_generation_ids());
    EXPECT_EQ(g.params.temperature, 0.5f);
    EXPECT_EQ(g.params.seed_lo, 9u);
    EXPECT_EQ(g.params.seed_hi, 0u);
    EXPECT_EQ(g.params.logprobs, -1);

    // Without max_tokens: the rest of the context; ignore_eos: no stop ids; token-id prompts as given.
    ASSERT_EQ(post("/v1/completions", R"({"prompt": [1, 2, 3], "ignore_eos": true})")->status, 200);
    EXPECT_EQ(submitted()[1].prompt, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(submitted()[1].max_new_tokens, kContext - 3);
    EXPECT_TRUE(submitted()[1].stop_ids.empty());
}

TEST_F(HttpServerTest, ChatStreamedEqualsNonStreamed) {
    start();
    const std::string req = R"({"messages": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "Greet me."}])";
    const auto plain = post("/v1/chat/completions", req + "}");
    ASSERT_TRUE(plain);
    ASSERT_EQ(plain->status, 200) << plain->body;
    const json body = json::parse(plain->body);
    EXPECT_EQ(body["object"], "chat.completion");
    EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
    const std::string text = body["choices"][0]["message"]["content"];
    EXPECT_EQ(text, "Hello 世界 😀!");
    // Qwen3's template as jinja2 renders it (testdata/goldens/chat_templates.json, system_user).
    EXPECT_EQ(submitted().at(0).prompt, qwen3_tokenizer().encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                                                      "Greet me.<|im_end|>\n<|im_start|>assistant\n"));

    const auto streamed =
        post("/v1/chat/completions", req + R"(, "stream": true, "stream_options": {"include_usage": true}})");
    ASSERT_TRUE(streamed);
    ASSERT_EQ(streamed->status, 200);
    EXPECT_EQ(streamed->header("Content-Type"), "text/event-stream");
    const std::vector<json> ev = events(streamed->body);
    ASSERT_GE(ev.size(), 4u);
    EXPECT_EQ(ev.front()["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(ev.back(), json("[DONE]"));
    const json& usage = ev[ev.size() - 2];
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"], body["usage"]);
    std::string joined;
    for (size_t i = 0; i + 2 < ev.size(); ++i) {
        EXPECT_EQ(ev[i]["object"], "chat.completion.chunk");
        EXPECT_EQ(ev[i]["id"], ev[0]["id"]);
        joined += ev[i]["choices"][0]["delta"]["content"].get<std::string>();
        EXPECT_EQ(ev[i]["choices"][0]["finish_reason"], i + 3 == ev.size() ? json("stop") : json(nullptr));
    }
    EXPECT_EQ(joined, text);

    // Without include_usage there is no usage chunk.
    const std::vector<json> ev2 = events(post("/v1/chat/completions", req + R"(, "stream": true})")->body);
    for (const json& e : ev2)
        if (e.is_object()) {
            EXPECT_FALSE(e.contains("usage"));
        }
}

// A Qwen-format answer with text before two parallel calls (Qwen's function-calling docs show Qwen2.5's output in
// this shape), as the scheduler's tokens.
const std::string kQwenCalls =
    "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"Paris news\"}}\n</tool_call>";
const std::string kToolsRequest = R"({"messages": [{"role": "user", "content": "Paris?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
               "properties": {"city": {"type": "string"}}}}},
              {"type": "function", "function": {"name": "search"}}])";

// The message a client assembles from streamed chunks, as the openai client does: content concatenated, each call's
// id, type and name from its first delta and its arguments concatenated.
json assemble(const std::vector<json>& events, std::string& finish) {
    std::string content;
    json calls = json::array();
    for (const json& e : events) {
        if (!e.is_object() || e["choices"].empty()) continue;
        const json& choice = e["choices"][0];
        if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
        const json& d = choice["delta"];
        if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
        if (!d.contains("tool_calls")) continue;
        for (const json& tc : d["tool_calls"]) {
            const size_t i = tc["index"];
            if (i == calls.size()) {
                EXPECT_TRUE(tc.contains("id")) << tc;  // the first delta of a call names it
                calls.push_back({{"id", tc["id"]}, {"type", tc["type"]},
                                 {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}});
            }
            json& args = calls.at(i)["function"]["arguments"];
            args = args.get<std::string>() + tc["function"]["arguments"].get<std::string>();
        }
    }
    return {{"content", content.empty() ? json(nullptr) : json(content)}, {"tool_calls", calls}};
}

TEST_F(HttpServerTest, ToolCallsAreParsedAndStreamedDeltasEqualTheAnswer) {
    context_ = 4096;
    script_ = updates_of(kQwenCalls);
    start();
    const auto plain = post("/v1/chat/completions", kToolsRequest + "}");
    ASSERT_TRUE(plain);
    ASSERT_EQ(plain->status, 200) << plain->body;
    const json choice = json::parse(plain->body)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    const json& msg = choice["message"];
    EXPECT_EQ(msg["content"], "Let me check both.");
    ASSERT_EQ(msg["tool_calls"].size(), 2u);
    EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
    EXPECT_EQ(msg["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_NE(msg["tool_calls"][0]["id"], msg["tool_calls"][1]["id"]);
    EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
    EXPECT_EQ(msg["tool_calls"][1]["function"]["name"], "search");

    const auto streamed = post("/v1/chat/completions", kToolsRequest + R"(, "stream": true})");
    ASSERT_TRUE(streamed);
    const std::vector<json> ev = events(streamed->body);
    std::string finish;
    json got = assemble(ev, finish);
    EXPECT_EQ(finish, "tool_calls");
    EXPECT_EQ(got["content"], msg["content"]);
    ASSERT_EQ(got["tool_calls"].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(got["tool_calls"][i]["id"].get<std::string>().rfind("call_", 0), 0u);
        got["tool_calls"][i]["id"] = msg["tool_calls"][i]["id"];  // ids are fresh per answer
    }
    EXPECT_EQ(got["tool_calls"], msg["tool_calls"]);
    for (const json& e : ev) {  // the markers never leak into content
        if (e.is_object() && e["choices"][0]["delta"].contains("content")) {
            EXPECT_EQ(e["choices"][0]["delta"]["content"].get<std::string>().find("tool_call"), std::string::npos);
        }
    }
}

// gpt-oss's template: answers are parsed for their harmony channels with or without tools (the chain of thought
// never reaches the client, streamed or not), and a call to an offered function is a tool call.
TEST_F(HttpServerTest, AHarmonyAnswerShowsItsFinalChannelAndItsCalls) {
    context_ = 4096;
    start("", false);
    make_ready(testing::read_text("testdata/chat_templates/gpt-oss-120b.jinja"));
    script_ = updates_of("<|channel|>analysis<|message|>Simple sum.<|end|><|start|>assistant<|channel|>final"
                         "<|message|>2 + 2 = 4.");
    const std::string plain = R"({"messages": [{"role": "user", "content": "2 + 2?"}])";
    const auto r = post("/v1/chat/completions", plain + "}");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], "2 + 2 = 4.");
    EXPECT_EQ(qwen3_tokenizer().decode(submitted().back().prompt).rfind("<|start|>assistant"),
              qwen3_tokenizer().decode(submitted().back().prompt).size() - 18);  // the template's generation prompt
    std::string finish;
    EXPECT_EQ(assemble(events(post("/v1/chat/completions", plain + R"(, "stream": true})")->body), finish)["content"],
              "2 + 2 = 4.");
    EXPECT_EQ(finish, "stop");

    script_ = updates_of("<|channel|>analysis<|message|>Weather.<|end|><|start|>assistant<|channel|>commentary "
                         "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}");
    // (gpt-oss's template adds each tool's description to a string, which jinja2 refuses when it is missing)
    const auto rc = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "The weather.",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})");
    ASSERT_TRUE(rc);
    ASSERT_EQ(rc->status, 200) << rc->body;
    const json call = json::parse(rc->body);
    const json& msg = call["choices"][0]["message"];
    EXPECT_TRUE(msg["content"].is_null()) << msg;
    ASSERT_EQ(msg["tool_calls"].size(), 1u) << msg;
    EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
    EXPECT_EQ(call["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(HttpServerTest, ToolsReachThePromptAndToolResultsAreAccepted) {
    context_ = 4096;
    start();
    ASSERT_EQ(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Paris?"}]})")->status, 200);
    ASSERT_EQ(post("/v1/chat/completions", kToolsRequest + "}")->status, 200);
    const auto loop = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}],
        "tools": [{"type": "function", "function": {"name": "get_weather"}}]})");
    ASSERT_TRUE(loop);
    EXPECT_EQ(loop->status, 200) << loop->body;
    const auto s = submitted();
    ASSERT_EQ(s.size(), 3u);
    EXPECT_GT(s[1].prompt.size(), s[0].prompt.size());
    const std::string with_tools = qwen3_tokenizer().decode(s[1].prompt);
    EXPECT_NE(with_tools.find("<tools>"), std::string::npos);
    EXPECT_NE(with_tools.find("\"name\": \"get_weather\""), std::string::npos);
    // Qwen3's template writes the call's arguments as the object they hold, and the result as a tool_response.
    const std::string loop_prompt = qwen3_tokenizer().decode(s[2].prompt);
    EXPECT_NE(loop_prompt.find("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"), std::string::npos)
        << loop_prompt;
    EXPECT_NE(loop_prompt.find("<tool_response>\n21 C\n</tool_response>"), std::string::npos) << loop_prompt;
}

TEST_F(HttpServerTest, ToolChoiceNoneAndMalformedCallsLeaveContent) {
    context_ = 4096;
    script_ = updates_of(kQwenCalls);
    start();
    const json none = json::parse(post("/v1/chat/completions", kToolsRequest + R"(, "tool_choice": "none"})")->body);
    EXPECT_EQ(none["choices"][0]["message"]["content"], kQwenCalls);
    EXPECT_FALSE(none["choices"][0]["message"].contains("tool_calls"));
    EXPECT_EQ(none["choices"][0]["finish_reason"], "stop");
    EXPECT_NE(qwen3_tokenizer().decode(submitted().back().prompt).find("<tools>"), std::string::npos);  // still offered

    const std::string bad = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
    script_ = updates_of(bad);
    for (const char* stream : {"false", "true"}) {
        const auto r = post("/v1/chat/completions", kToolsRequest + R"(, "stream": )" + stream + "}");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        std::string finish;
        const json msg = std::string(stream) == "true" ? assemble(events(r->body), finish)
                                                       : json::parse(r->body)["choices"][0]["message"];
        if (finish.empty()) finish = json::parse(r->body)["choices"][0]["finish_reason"];
        EXPECT_EQ(msg["content"], bad) << stream;
        EXPECT_TRUE(!msg.contains("tool_calls") || msg["tool_calls"].empty()) << stream;
        EXPECT_EQ(finish, "stop") << stream;
    }
}

// A forced call reaches the scheduler as a constraint (what it allows: ForcedToolCall.*); a template that shows no
// tool-call format cannot force one, and a forced call contradicts response_format.
TEST_F(HttpServerTest, ForcedToolChoiceIsAConstraint) {
    context_ = 4096;
    with_grammar_ = true;
    start();
    for (const char* choice : {R"("required")", R"({"type": "function", "function": {"name": "search"}})"}) {
        const auto r = post("/v1/chat/completions", kToolsRequest + R"(, "tool_choice": )" + choice + "}");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200) << r->body;
        ASSERT_FALSE(submitted().empty());
        EXPECT_NE(submitted().back().constraint, nullptr) << choice;
    }
    EXPECT_EQ(post("/v1/chat/completions", kToolsRequest + "}")->status, 200);
    EXPECT_EQ(submitted().back().constraint, nullptr) << "tool_choice auto constrains nothing";
    expect_error(post("/v1/chat/completions",
                      kToolsRequest + R"(, "tool_choice": "required", "response_format": {"type": "json_object"}})"),
                 400, "response_format");
    make_ready("{% for m in messages %}{{ m.content }}{% endfor %}");
    expect_error(post("/v1/chat/completions", kToolsRequest + R"(, "tool_choice": "required"})"), 400,
                 "tool_choice");
}

TEST_F(HttpServerTest, StopStringEndsTheRequest) {
    script_ = updates_of("one two STOP three four", Finish::Length);
    start();
    const auto r = post("/v1/completions", R"({"prompt": "count", "stop": "STOP"})");
    ASSERT_TRUE(r);
    const json body = json::parse(r->body);
    EXPECT_EQ(body["choices"][0]["text"], "one two ");
    EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
    EXPECT_TRUE(last()->cancelled);  // the scheduler is told to free the sequence
    // Tokens up to the one that completed the stop string count.
    const std::vector<int32_t> ids = qwen3_tokenizer().encode("one two STOP three four");
    int64_t n = 0;
    while (qwen3_tokenizer().decode(std::vector<int32_t>(ids.begin(), ids.begin() + n)).find("STOP") == std::string::npos) ++n;
    EXPECT_EQ(body["usage"]["completion_tokens"], n);

    const auto s = post("/v1/completions", R"({"prompt": "count", "stop": ["STOP"], "stream": true})");
    std::string joined;
    const std::vector<json> ev = events(s->body);
    for (const json& e : ev)
        if (e.is_object()) {
            joined += e["choices"][0]["text"].get<std::string>();
        }
    EXPECT_EQ(joined, "one two ");
    EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "stop");
}

TEST_F(HttpServerTest, ALengthFinishIsReportedAndAnErrorFinishIsAServerError) {
    script_ = updates_of("abc", Finish::Length);
    start();
    EXPECT_EQ(json::parse(post("/v1/completions", R"({"prompt": "x"})")->body)["choices"][0]["finish_reason"],
              "length");
    {
        std::lock_guard<std::mutex> lock(mu_);
        script_ = updates_of("abc", Finish::Error);
    }
    const json e = json::parse(post("/v1/completions", R"({"prompt": "x"})")->body);
    EXPECT_EQ(e["error"]["message"], "boom");
    EXPECT_EQ(e["error"]["type"], "server_error");
}

TEST_F(HttpServerTest, RequestedLogprobsReachTheSchedulerAndTheAnswer) {
    script_.clear();
    const int32_t hello = *qwen3_tokenizer().token_id("Hello"), hi = *qwen3_tokenizer().token_id("Hi");
    script_.push_back({{hello}, {{hello, -0.5f, {{hello, -0.5f}, {hi, -1.0f}}}}, Finish::None, "", {}});
    script_.push_back({{}, {}, Finish::Stop, "", {}});
    start();
    const json body =
        json::parse(post("/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 2})")
                        ->body);
    EXPECT_EQ(submitted().at(0).params.logprobs, 2);
    const json& c = body["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0]["token"], "Hello");
    EXPECT_EQ(c[0]["logprob"], -0.5);
    EXPECT_EQ(c[0]["top_logprobs"][1]["token"], "Hi");
    const json comp = json::parse(post("/v1/completions", R"({"prompt": "x", "logprobs": 1})")->body);
    EXPECT_EQ(comp["choices"][0]["logprobs"]["tokens"], json::array({"Hello"}));
    EXPECT_EQ(comp["choices"][0]["logprobs"]["text_offset"], json::array({0}));
}

TEST_F(HttpServerTest, BadRequestsGetTheirStatusAndNeverReachTheScheduler) {
    start();
    expect_error(post("/v1/chat/completions", "{not json"), 400);
    expect_error(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_p": 2})"), 400,
                 "top_p");
    expect_error(post("/v1/completions", R"({"prompt": "x", "n": 129})"), 400, "n");
    expect_error(post("/v1/completions", R"({"prompt": ["x", [999999999]]})"), 400, "prompt");  // all or none
    expect_error(post("/v1/completions", R"({"prompt": [999999999]})"), 400, "prompt");
    std::string words;
    for (int i = 0; i < 100; ++i) words += " word";
    expect_error(post("/v1/completions", R"({"prompt": ")" + words + R"("})"), 400, "prompt");  // RequestError
    expect_error(post("/v1/completions", R"({"prompt": "x", "model": "gpt-4"})"), 404, "model");
    expect_error(post("/v1/nothing", "{}"), 404);
    expect_error(get("/v2/models"), 404);
    expect_error(post("/v1/completions", R"({"prompt": ")" + std::string(5000, 'a') + R"("})"), 413);
    EXPECT_EQ(submitted().size(), 0u);  // none of them reached the scheduler
}

// POST /tokenize gives the ids of Hugging Face's tokenizer for Qwen3 (the independent goldens of
// testdata/tokenizer/qwen3_encode.jsonl), in vLLM's shape or llama-server's, and /detokenize gives each text back.
TEST_F(HttpServerTest, TokenizeAndDetokenizeMatchTheGoldens) {
    context_ = 4096;  // the longest golden's ids fit a detokenize request
    max_body_bytes_ = 64 * 1024;
    start();
    const auto lines = testing::read_jsonl(testing::repo_path("testdata/tokenizer/qwen3_encode.jsonl"));
    ASSERT_GT(lines.size(), 200u);
    for (const json& line : lines) {
        const std::string text = line.at("text").get<std::string>();
        const json ids = line.at("ids");
        SCOPED_TRACE(json(text).dump());
        const auto vllm = post("/tokenize", json{{"prompt", text}}.dump());
        ASSERT_TRUE(vllm);
        ASSERT_EQ(vllm->status, 200) << vllm->body;
        EXPECT_EQ(json::parse(vllm->body), json({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", 4096}}));
        const auto llama = post("/tokenize", json{{"content", text}}.dump());
        ASSERT_TRUE(llama);
        ASSERT_EQ(llama->status, 200) << llama->body;
        EXPECT_EQ(json::parse(llama->body), json({{"tokens", ids}}));
        const auto back = post("/detokenize", json{{"tokens", ids}}.dump());
        ASSERT_TRUE(back);
        ASSERT_EQ(back->status, 200) << back->body;
        EXPECT_EQ(json::parse(back->body), json({{"prompt", text}, {"content", text}}));
    }
    EXPECT_TRUE(submitted().empty());  // nothing reached the scheduler
}

// A chat's ids are those of Qwen3's ChatML written out here, with and without the generation prompt, and those
// a chat completion of the same messages submits.
TEST_F(HttpServerTest, TokenizeOfMessagesIsTheChatPrompt) {
    start();
    const std::string msgs = R"({"messages": [{"role": "user", "content": "What is the capital of France?"}])";
    const std::vector<int32_t> turn = qwen3_tokenizer().encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n");
    std::vector<int32_t> prompt = turn;
    for (const int32_t id : qwen3_tokenizer().encode("<|im_start|>assistant\n")) prompt.push_back(id);
    const auto with = post("/tokenize", msgs + "}");
    ASSERT_TRUE(with);
    ASSERT_EQ(with->status, 200) << with->body;
    EXPECT_EQ(json::parse(with->body)["tokens"].get<std::vector<int32_t>>(), prompt);
    EXPECT_EQ(json::parse(with->body)["count"], prompt.size());
    const auto without = post("/tokenize", msgs + R"(, "add_generation_prompt": false})");
    ASSERT_TRUE(without);
    EXPECT_EQ(json::parse(without->body)["tokens"].get<std::vector<int32_t>>(), turn);
    ASSERT_EQ(post("/v1/chat/completions", msgs + "}")->status, 200);
    EXPECT_EQ(submitted().at(0).prompt, prompt);
}

TEST_F(HttpServerTest, BadTokenizeAndDetokenizeRequestsAreNamed) {
    start("", false);
    expect_error(post("/tokenize", R"({"prompt": "x"})"), 503);
    make_ready();
    const std::string vocab = std::to_string(qwen3_tokenizer().vocab_size());
    expect_error(post("/detokenize", R"({"tokens": [1, -1]})"), 400, "tokens");
    expect_error(post("/detokenize", R"({"tokens": [1, )" + vocab + "]}"), 400, "tokens");
    expect_error(post("/detokenize", R"({"tokens": [1, 2.5]})"), 400, "tokens");
    expect_error(post("/detokenize", R"({"tokens": "1 2"})"), 400, "tokens");
    expect_error(post("/detokenize", "{}"), 400, "tokens");
    const std::vector<int32_t> too_many(kContext + 1, 9707);
    expect_error(post("/detokenize", json{{"tokens", too_many}}.dump()), 400, "tokens");
    const std::vector<int32_t> context_full(kContext, 9707);
    EXPECT_EQ(post("/detokenize", json{{"tokens", context_full}}.dump())->status, 200);
    expect_error(post("/tokenize", "{}"), 400, "prompt");
    expect_error(post("/tokenize", R"({"prompt": "x", "content": "y"})"), 400, "content");
    expect_error(post("/tokenize", R"({"prompt": 5})"), 400, "prompt");
    expect_error(post("/tokenize", R"({"messages": []})"), 400, "messages");
    expect_error(post("/tokenize", R"({"content": "x", "with_pieces": true})"), 400, "with_pieces");
    expect_error(post("/tokenize", R"({"prompt": "x", "add_special_tokens": "yes"})"), 400, "add_special_tokens");
    expect_error(post("/tokenize", R"({"prompt": "x", "model": "gpt-4"})"), 404, "model");
    expect_error(post("/detokenize", R"({"tokens": [1], "model": "gpt-4"})"), 404, "model");
    expect_error(post("/tokenize", R"({"prompt": ")" + std::string(5000, 'a') + R"("})"), 413);
    expect_error(get("/tokenize"), 404);
    EXPECT_TRUE(submitted().empty());
}

// GET /v1/models/{id}: the model object for the served id (sent as it is or percent-encoded), OpenAI's 404 for
// any other.
TEST_F(HttpServerTest, AModelIsRetrievedByItsIdAndOthersAreNotFound) {
    start();
    for (const char* path : {"/v1/models/test-model", "/v1/models/test%2Dmodel", "/v1/models/test-model?x=1"}) {
        const auto m = get(path);
        ASSERT_TRUE(m);
        ASSERT_EQ(m->status, 200) << path << " " << m->body;
        const json model = json::parse(m->body);
        EXPECT_EQ(model["id"], "test-model");
        EXPECT_EQ(model["object"], "model");
        EXPECT_EQ(model["owned_by"], "tracelm");
        EXPECT_TRUE(model["created"].is_number_integer());
        EXPECT_EQ(model, json::parse(get("/v1/models")->body)["data"][0]);
    }
    for (const char* path : {"/v1/models/gpt-4o", "/v1/models/test-model/x", "/v1/models/", "/v1/models/test"}) {
        const auto m = get(path);
        expect_error(m, 404, "model");
        EXPECT_EQ(json::parse(m->body)["error"]["code"], "model_not_found") << path;
        EXPECT_EQ(json::parse(m->body)["error"]["type"], "invalid_request_error") << path;
    }
    expect_error(post("/v1/models/test-model", "{}"), 404);
}

// POST /v1/embeddings: every input's prompt submitted as an embed request, the answer in OpenAI's shape with each
// vector L2-normalised, in the inputs' order; base64 is the little-endian float32 bytes (the expected strings from
// Python: base64.b64encode(struct.pack('<2f', ...))).
TEST_F(HttpServerTest, EmbeddingsMapTheInputsAndAnswerInOpenAIsShape) {
    start();
    const auto r = post("/v1/embeddings", R"({"model": "test-model", "input": ["Hello", "Hello, world!"]})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json body = json::parse(r->body);
    const std::vector<int32_t> hello = qwen3_tokenizer().encode("Hello"), world = qwen3_tokenizer().encode("Hello, world!");
    ASSERT_EQ(submitted().size(), 2u);
    EXPECT_TRUE(submitted()[0].embed);
    EXPECT_EQ(submitted()[0].prompt, hello);
    EXPECT_EQ(submitted()[1].prompt, world);
    EXPECT_EQ(body["object"], "list");
    EXPECT_EQ(body["model"], "test-model");
    EXPECT_EQ(body["usage"], json({{"prompt_tokens", hello.size() + world.size()},
                                   {"total_tokens", hello.size() + world.size()}}));
    ASSERT_EQ(body["data"].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        const json& d = body["data"][i];
        EXPECT_EQ(d["object"], "embedding");
        EXPECT_EQ(d["index"], i);
        const double n = static_cast<double>((i == 0 ? hello : world).size());
        const std::vector<float> v = d["embedding"].get<std::vector<float>>();
        ASSERT_EQ(v.size(), 2u);
        EXPECT_FLOAT_EQ(v[0], static_cast<float>(n / std::sqrt(n * n + 1)));
        EXPECT_FLOAT_EQ(v[1], static_cast<float>(1 / std::sqrt(n * n + 1)));
    }
    // Token ids, one list or several; base64.
    const auto ids = post("/v1/embeddings", R"({"input": [[1, 2, 3], [4]], "encoding_format": "base64"})");
    ASSERT_TRUE(ids);
    ASSERT_EQ(ids->status, 200) << ids->body;
    EXPECT_EQ(submitted().at(2).prompt, std::vector<int32_t>({1, 2, 3}));
    EXPECT_EQ(submitted().at(3).prompt, std::vector<int32_t>({4}));
    EXPECT_EQ(json::parse(ids->body)["data"][0]["embedding"], "6dxyP5vooT4=");  // (3, 1) / sqrt(10)
    EXPECT_EQ(json::parse(ids->body)["data"][1]["embedding"], "8wQ1P/MENT8=");  // (1, 1) / sqrt(2)
    const auto flat = post("/v1/embeddings", R"({"input": [7, 8], "dimensions": 2, "encoding_format": "float"})");
    ASSERT_TRUE(flat);
    EXPECT_EQ(flat->status, 200) << flat->body;
    EXPECT_EQ(submitted().at(4).prompt, std::vector<int32_t>({7, 8}));
}

TEST_F(HttpServerTest, BadEmbeddingRequestsAreNamed) {
    max_body_bytes_ = 64 * 1024;  // room for more inputs than a request may hold
    start("", false);
    expect_error(post("/v1/embeddings", R"({"input": "x"})"), 503);
    make_ready();
    expect_error(post("/v1/embeddings", "{}"), 400, "input");
    expect_error(post("/v1/embeddings", R"({"input": []})"), 400, "input");
    expect_error(post("/v1/embeddings", R"({"input": ""})"), 400, "input");
    expect_error(post("/v1/embeddings", R"({"input": ["a", ""]})"), 400, "input");
    expect_error(post("/v1/embeddings", R"({"input": ["a", 1]})"), 400, "input");
    expect_error(post("/v1/embeddings", R"({"input": [[1], []]})"), 400, "input");
    expect_error(post("/v1/embeddings", R"({"input": [1, -2]})"), 400, "input");
    expect_error(post("/v1/embeddings", R"({"input": {"text": "a"}})"), 400, "input");
    expect_error(post("/v1/embeddings", R"({"input": [999999999]})"), 400, "input");  // the scheduler's refusal
    expect_error(post("/v1/embeddings", R"({"input": "a", "dimensions": 3})"), 400, "dimensions");
    expect_error(post("/v1/embeddings", R"({"input": "a", "encoding_format": "int8"})"), 400, "encoding_format");
    expect_error(post("/v1/embeddings", R"({"input": "a", "model": "gpt-4"})"), 404, "model");
    const std::vector<std::string> many(kMaxEmbeddingInputs + 1, "a");
    expect_error(post("/v1/embeddings", json{{"input", many}}.dump()), 400, "input");
    EXPECT_TRUE(submitted().empty());
}

TEST_F(HttpServerTest, AModelPooledOtherwiseGetsNoEmbeddings) {
    hidden_size_ = 0;
    start();
    const auto r = post("/v1/embeddings", R"({"input": "Hello"})");
    expect_error(r, 400, "model");
    EXPECT_NE(r->body.find("pooling"), std::string::npos) << r->body;
    EXPECT_TRUE(submitted().empty());
    EXPECT_EQ(post("/v1/completions", R"({"prompt": "Hello"})")->status, 200);  // completions are served as ever
}

// chat_template_kwargs reach the template: Qwen3's enable_thinking false writes an empty think block after the
// generation prompt (the text jinja2 renders, testdata/goldens/chat_templates.json, no_thinking).
TEST_F(HttpServerTest, ChatTemplateKwargsReachTheTemplate) {
    start();
    const std::string msgs = R"({"messages": [{"role": "user", "content": "What is the capital of France?"}])";
    ASSERT_EQ(post("/v1/chat/completions", msgs + R"(, "chat_template_kwargs": {"enable_thinking": false}})")->status,
              200);
    EXPECT_EQ(submitted().at(0).prompt,
              qwen3_tokenizer().encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
                            "<think>\n\n</think>\n\n"));
    expect_error(post("/v1/chat/completions", msgs + R"(, "chat_template_kwargs": 5})"), 400, "chat_template_kwargs");
    EXPECT_EQ(submitted().size(), 1u);
}

// A template that raises, fails or runs into a limit answers the request with a 400 naming the template's message,
// and the server goes on serving.
TEST_F(HttpServerTest, ATemplateErrorIsA400NamingTheTemplatesMessage) {
    start("", false);
    make_ready(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('No system messages, please.') }}"
        "{% elif m.content == 'loop' %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
        "{% endfor %}{% endif %}{{ m.content | upper }}{% endfor %}");
    const auto raised = post("/v1/chat/completions", R"({"messages": [{"role": "system", "content": "x"}]})");
    expect_error(raised, 400, "messages");
    EXPECT_NE(json::parse(raised->body)["error"]["message"].get<std::string>().find("No system messages, please."),
              std::string::npos)
        << raised->body;
    const auto limited = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "loop"}]})");
    expect_error(limited, 400, "messages");
    EXPECT_NE(limited->body.find("limit"), std::string::npos) << limited->body;
    EXPECT_TRUE(submitted().empty());
    ASSERT_EQ(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})")->status, 200);
    EXPECT_EQ(submitted().at(0).prompt, qwen3_tokenizer().encode("HI"));
}

// add_generation_prompt and continue_final_message reach the template's rendering: a closed last turn, a new
// turn opened, or the assistant's last message left open right after its content.
TEST_F(HttpServerTest, ContinuingTheFinalMessageLeavesItOpen) {
    start("", false);
    make_ready("{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
               "{% if add_generation_prompt %}<assistant>{% endif %}");
    const std::string msgs = R"({"messages": [{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": "Once upon"}])";
    for (const char* extra : {"", R"(, "add_generation_prompt": false)", R"(, "continue_final_message": true)"})
        ASSERT_EQ(post("/v1/chat/completions", msgs + extra + "}")->status, 200) << extra;
    ASSERT_EQ(submitted().size(), 3u);
    EXPECT_EQ(submitted()[0].prompt, qwen3_tokenizer().encode("<user>hi</user><assistant>Once upon</assistant><assistant>"));
    EXPECT_EQ(submitted()[1].prompt, qwen3_tokenizer().encode("<user>hi</user><assistant>Once upon</assistant>"));
    EXPECT_EQ(submitted()[2].prompt, qwen3_tokenizer().encode("<user>hi</user><assistant>Once upon"));
    expect_error(post("/v1/chat/completions", msgs + R"(, "continue_final_message": true,
                                                        "add_generation_prompt": true})"),
                 400, "continue_final_message");
    EXPECT_EQ(submitted().size(), 3u);
}

// echo: a completion's text opens with its prompt (token ids: decoded); streamed, the prompt is the first chunk.
// usage still counts the generated tokens only.
TEST_F(HttpServerTest, EchoPrependsThePrompt) {
    start();
    const json plain = json::parse(post("/v1/completions", R"({"prompt": "Say hi", "echo": true})")->body);
    EXPECT_EQ(plain["choices"][0]["text"], "Say hi" "Hello 世界 😀!");
    EXPECT_EQ(plain["usage"]["completion_tokens"], qwen3_tokenizer().encode("Hello 世界 😀!").size());
    const std::vector<int32_t> ids = qwen3_tokenizer().encode("Say hi");
    const json from_ids = json::parse(
        post("/v1/completions", R"({"prompt": )" + json(ids).dump() + R"(, "echo": true})")->body);
    EXPECT_EQ(from_ids["choices"][0]["text"], "Say hi" "Hello 世界 😀!");
    const auto streamed = post("/v1/completions", R"({"prompt": "Say hi", "echo": true, "stream": true})");
    ASSERT_TRUE(streamed);
    const std::vector<json> ev = events(streamed->body);
    ASSERT_GE(ev.size(), 3u);
    EXPECT_EQ(ev[0]["choices"][0]["text"], "Say hi");
    std::string text;
    for (const json& e : ev)
        if (e.is_object()) text += e["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(text, "Say hi" "Hello 世界 😀!");
    // Without echo the answer is the generated text alone.
    EXPECT_EQ(json::parse(post("/v1/completions", R"({"prompt": "Say hi"})")->body)["choices"][0]["text"],
              "Hello 世界 😀!");
}

// A list of prompts with n choices each: choice i is prompt i / n's choice i % n, seeded seed + i % n; the usage
// counts each prompt once and every choice's tokens; streamed, each choice's chunks carry its index.
TEST_F(HttpServerTest, SeveralPromptsAndChoicesAreIndexedInOrder) {
    start();
    const std::string req = R"({"prompt": ["Say hi", [1, 2, 3]], "n": 2, "seed": 9, "temperature": 0.5,
                                "echo": true)";
    const json body = json::parse(post("/v1/completions", req + "}")->body);
    const std::string answer = "Hello 世界 😀!";
    const std::vector<std::string> echoes = {"Say hi", "Say hi", qwen3_tokenizer().decode({1, 2, 3}), qwen3_tokenizer().decode({1, 2, 3})};
    ASSERT_EQ(body["choices"].size(), 4u) << body;
    const auto sent = submitted();
    ASSERT_EQ(sent.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(body["choices"][i]["index"], i);
        EXPECT_EQ(body["choices"][i]["text"], echoes[i] + answer);
        EXPECT_EQ(body["choices"][i]["finish_reason"], "stop");
        EXPECT_EQ(sent[i].prompt, (i < 2 ? qwen3_tokenizer().encode("Say hi") : std::vector<int32_t>{1, 2, 3}));
        EXPECT_EQ(sent[i].params.seed_lo, 9u + i % 2);
    }
    const auto prompt_tokens = static_cast<int64_t>(qwen3_tokenizer().encode("Say hi").size() + 3);
    const auto completion_tokens = static_cast<int64_t>(4 * qwen3_tokenizer().encode(answer).size());
    EXPECT_EQ(body["usage"]["prompt_tokens"], prompt_tokens);
    EXPECT_EQ(body["usage"]["completion_tokens"], completion_tokens);

    const std::vector<json> ev =
        events(post("/v1/completions", req + R"(, "stream": true, "stream_options": {"include_usage": true}})")->body);
    ASSERT_GE(ev.size(), 2u);
    EXPECT_EQ(ev.back(), json("[DONE]"));
    EXPECT_EQ(ev[ev.size() - 2]["usage"], body["usage"]);
    std::vector<std::string> texts(4);
    std::vector<int> finishes(4, 0);
    for (size_t i = 0; i + 2 < ev.size(); ++i) {
        const json& c = ev[i]["choices"].at(0);
        const size_t index = c["index"];
        ASSERT_LT(index, 4u);
        EXPECT_EQ(finishes[index], 0) << "a chunk after the choice's finish";
        texts[index] += c["text"].get<std::string>();
        if (!c["finish_reason"].is_null()) ++finishes[index];
    }
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(texts[i], echoes[i] + answer);
        EXPECT_EQ(finishes[i], 1);
    }

    // A chat's n choices: each opens with the assistant's role.
    const std::vector<json> chat = events(
        post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": 3, "stream": true})")
            ->body);
    std::set<size_t> roles;
    for (const json& e : chat)
        if (e.is_object() && e["choices"][0]["delta"].contains("role")) roles.insert(e["choices"][0]["index"].get<size_t>());
    EXPECT_EQ(roles, (std::set<size_t>{0, 1, 2}));
}

// echo with logprobs: the prompt is scored (the scheduler's prompt_logprobs) and its tokens open the logprobs, the
// first with null as OpenAI shows it; the answer's offsets count from the start of the echoed text.
TEST_F(HttpServerTest, EchoWithLogprobsScoresThePrompt) {
    const std::vector<int32_t> ids = qwen3_tokenizer().encode("Say hi");
    ASSERT_GE(ids.size(), 2u);
    const int32_t hello = *qwen3_tokenizer().token_id("Hello");
    std::vector<sampling::TokenLogprobs> scores;
    for (size_t i = 1; i < ids.size(); ++i) scores.push_back({ids[i], -1.5f * static_cast<float>(i), {{hello, -0.25f}}});
    script_.clear();
    script_.push_back({{hello}, {{hello, -0.5f, {{hello, -0.5f}}}}, Finish::None, "", scores});
    script_.push_back({{}, {}, Finish::Stop, "", {}});
    start();
    const std::string req = R"({"prompt": "Say hi", "echo": true, "logprobs": 1)";
    const json body = json::parse(post("/v1/completions", req + "}")->body);
    EXPECT_EQ(submitted().back().prompt_logprobs, 1);
    const json& c = body["choices"][0];
    EXPECT_EQ(c["text"], "Say hiHello");
    const json& lp = c["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), ids.size() + 1) << lp;
    std::string prompt_text;
    for (size_t i = 0; i < ids.size(); ++i) {
        EXPECT_EQ(lp["tokens"][i], qwen3_tokenizer().decode({ids[i]}));
        EXPECT_EQ(lp["text_offset"][i], prompt_text.size());  // ASCII: characters are bytes
        prompt_text += qwen3_tokenizer().decode({ids[i]});
        if (i == 0) {
            EXPECT_TRUE(lp["token_logprobs"][0].is_null());
            EXPECT_TRUE(lp["top_logprobs"][0].is_null());
        } else {
            EXPECT_EQ(lp["token_logprobs"][i], -1.5 * static_cast<double>(i));
            EXPECT_EQ(lp["top_logprobs"][i], json({{"Hello", -0.25}}));
        }
    }
    EXPECT_EQ(lp["tokens"].back(), "Hello");
    EXPECT_EQ(lp["token_logprobs"].back(), -0.5);
    EXPECT_EQ(lp["text_offset"].back(), 6);  // after "Say hi"

    const std::vector<json> ev = events(post("/v1/completions", req + R"(, "stream": true})")->body);
    ASSERT_GE(ev.size(), 3u);
    EXPECT_EQ(ev[0]["choices"][0]["text"], "Say hi");  // the echo comes with the prompt's logprobs
    EXPECT_EQ(ev[0]["choices"][0]["logprobs"]["tokens"].size(), ids.size());
    EXPECT_EQ(ev[1]["choices"][0]["text"], "Hello");
    EXPECT_EQ(ev[1]["choices"][0]["logprobs"]["text_offset"], json::array({6}));
}

TEST_F(HttpServerTest, AnApiKeyGuardsEveryRouteButHealth) {
    start("sesame");
    const std::string body = R"({"prompt": "x"})";
    expect_error(post("/v1/completions", body), 401);
    expect_error(post("/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401);
    expect_error(post("/v1/completions", body, {{"Authorization", "Bearer sesam"}}), 401);
    expect_error(post("/v1/completions", body, {{"Authorization", "sesame"}}), 401);
    const auto ok = post("/v1/completions", body, {{"Authorization", "Bearer sesame"}});
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200);
    EXPECT_EQ(get("/health")->status, 200);  // liveness stays open
    expect_error(get("/metrics"), 401);
    EXPECT_EQ(get("/metrics", {{"Authorization", "Bearer sesame"}})->status, 200);
    expect_error(get("/v1/models"), 401);
    expect_error(get("/v1/models/test-model"), 401);
    expect_error(post("/tokenize", body), 401);
    expect_error(post("/detokenize", R"({"tokens": [1]})"), 401);
    expect_error(post("/v1/embeddings", R"({"input": "x"})"), 401);
    expect_error(post("/elsewhere", body), 401);  // unknown routes too: nothing is answered before the key
    EXPECT_EQ(submitted().size(), 1u);
}

TEST_F(HttpServerTest, MetricsCanBePublicUnderAnApiKey) {
    start("sesame", true, true);
    EXPECT_EQ(get("/metrics")->status, 200);
    expect_error(get("/v1/models"), 401);
}

// As vLLM and OpenAI: a max_tokens the context cannot hold after the prompt is refused, not cut short.
TEST_F(HttpServerTest, MaxTokensBeyondTheContextIsA400) {
    start();
    const int64_t prompt = static_cast<int64_t>(qwen3_tokenizer().encode("x").size()), room = kContext - prompt;
    const auto over = post("/v1/completions", R"({"prompt": "x", "max_tokens": )" + std::to_string(room + 1) + "}");
    expect_error(over, 400, "max_tokens");
    EXPECT_EQ(json::parse(over->body)["error"]["message"],
              "This model's maximum context length is " + std::to_string(kContext) + " tokens. However, you "
              "requested " + std::to_string(kContext + 1) + " tokens (" + std::to_string(prompt) + " in the prompt, " +
              std::to_string(room + 1) + " in the completion; 'max_tokens'). Please reduce the length of the prompt "
              "or completion.");
    expect_error(post("/v1/chat/completions",
                      R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 100000})"),
                 400, "max_completion_tokens");
    EXPECT_EQ(submitted().size(), 0u);
    ASSERT_EQ(post("/v1/completions", R"({"prompt": "x", "max_tokens": )" + std::to_string(room) + "}")->status, 200);
    EXPECT_EQ(submitted().at(0).max_new_tokens, room);
}

// A raw client: sends `request` (half-closing after it when asked) and reads until the server closes, `until` has
// arrived (an empty `until`: at once) or `wait` has passed; then closes the connection.
std::string raw_exchange(int port, const std::string& request, bool half_close = false,
                         const std::optional<std::string>& until = std::nullopt, std::chrono::milliseconds wait = 5s) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
    if (half_close) shutdown(fd, SHUT_WR);
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (!(until && got.find(*until) != std::string::npos) && std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        char buf[4096];
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return got;
}

std::string completion_request(const std::string& body, const std::string& version = "1.1",
                               const std::string& extra = "") {
    return "POST /v1/completions HTTP/" + version + "\r\nHost: x\r\n" + extra +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A completion request whose client hangs up once `until` has arrived (or after `wait`).
std::string send_then_hang_up(int port, const std::string& body, const std::string& until,
                              std::chrono::milliseconds wait = 5s) {
    return raw_exchange(port, completion_request(body, "1.1", "Content-Type: application/json\r\n"), false, until,
                        wait);
}

bool eventually(const std::atomic<bool>& flag) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!flag && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    return flag;
}

TEST_F(HttpServerTest, WaitingStreamGetsKeepAlivesAndADisconnectCancels) {
    script_.clear();  // queued forever: the stream only times out
    start();
    const std::string got = send_then_hang_up(port_, R"({"prompt": "x", "stream": true})", ": keep-alive\n\n");
    EXPECT_NE(got.find("200 OK"), std::string::npos);
    EXPECT_NE(got.find(": keep-alive\n\n"), std::string::npos);
    ASSERT_TRUE(last());
    EXPECT_TRUE(eventually(last()->cancelled));
}

TEST_F(HttpServerTest, NonStreamedDisconnectCancels) {
    script_.clear();
    start();
    send_then_hang_up(port_, R"({"prompt": "x"})", "");  // hangs up at once: nothing is sent before the answer
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!last() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    ASSERT_TRUE(last());
    EXPECT_TRUE(eventually(last()->cancelled));
}

size_t count(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

// Pipelined requests on one connection are all answered, in order.
TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
    start();
    const std::string got =
        raw_exchange(port_, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + completion_request(R"({"prompt": "x"})") +
                            "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(count(got, "HTTP/1.1 200 OK"), 3u) << got;
    const size_t completion = got.find("text_completion"), models = got.find("\"object\":\"list\"");
    ASSERT_NE(completion, std::string::npos) << got;
    ASSERT_NE(models, std::string::npos) << got;
    EXPECT_LT(completion, models);
}

// HTTP/1.0 has no chunked encoding: a length for a whole answer, the connection's end for a stream.
TEST_F(HttpServerTest, Http10GetsNoChunks) {
    start();
    const std::string plain = raw_exchange(port_, completion_request(R"({"prompt": "x"})", "1.0"));
    EXPECT_EQ(plain.rfind("HTTP/1.0 200 OK", 0), 0u) << plain;
    EXPECT_NE(plain.find("Content-Length: "), std::string::npos) << plain;
    const std::string streamed = raw_exchange(port_, completion_request(R"({"prompt": "x", "stream": true})", "1.0"));
    EXPECT_EQ(streamed.rfind("HTTP/1.0 200 OK", 0), 0u) << streamed;
    EXPECT_EQ(streamed.find("chunked"), std::string::npos) << streamed;
    EXPECT_EQ(streamed.substr(streamed.size() - 14), "data: [DONE]\n\n");
}

// A client that half-closes after its request gets the answer.
TEST_F(HttpServerTest, AHalfClosedClientGetsItsAnswer) {
    start();
    const std::string got = raw_exchange(port_, completion_request(R"({"prompt": "x"})"), true);
    EXPECT_EQ(got.rfind("HTTP/1.1 200 OK", 0), 0u) << got;
    EXPECT_NE(got.find("Hello"), std::string::npos) << got;
}

// Bodies are limited while they arrive, whatever the framing; lengths must be valid and agree.
TEST_F(HttpServerTest, BodyLimitsAndLengthsAreCheckedWhileReading) {
    start();
    std::string chunked = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 8; ++i) chunked.append("400\r\n").append(1024, 'a').append("\r\n");  // 8 KiB > 4096
    EXPECT_EQ(raw_exchange(port_, chunked).rfind("HTTP/1.1 413", 0), 0u);
    const auto status = [this](const std::string& headers) {
        return raw_exchange(port_, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n{}").substr(0, 12);
    };
    EXPECT_EQ(status("Content-Length: 2\r\nContent-Length: 3\r\n"), "HTTP/1.1 400");
    EXPECT_EQ(status("Content-Length: -5\r\n"), "HTTP/1.1 400");
    EXPECT_EQ(status("Content-Length: 2\r\nTransfer-Encoding: chunked\r\n"), "HTTP/1.1 400");
    EXPECT_EQ(status(""), "HTTP/1.1 411");
    EXPECT_EQ(status("Content-Length: 99999\r\n"), "HTTP/1.1 413");  // refused from the header alone
    EXPECT_EQ(submitted().size(), 0u);
}

// The read that watches for a disconnect has no deadline: an answer that takes longer than a write's timeout is not
// cut (keep-alive comments go on), and the request is cancelled only when the client leaves.
TEST_F(HttpServerTest, AWaitingStreamOutlivesTheWriteTimeout) {
    script_.clear();
    write_timeout_ = 50ms;
    start();
    const std::string got =
        send_then_hang_up(port_, R"({"prompt": "x", "stream": true})", "never sent", 500ms);
    ASSERT_TRUE(last());
    EXPECT_GE(count(got, ": keep-alive"), 10u) << got;  // 500 ms at one per 20 ms: far past 50 ms, still connected
    EXPECT_TRUE(eventually(last()->cancelled));
}

TEST_F(HttpServerTest, StopEndsWaitingRequests) {
    script_.clear();
    start();
    std::thread client([this] { post("/v1/completions", R"({"prompt": "x"})"); });
    while (!last()) std::this_thread::sleep_for(10ms);
    server_->stop();
    thread_.join();  // returns although the request never got a token
    client.join();
    EXPECT_TRUE(last()->cancelled);
}

// stop() ends run() whenever it comes: before run(), while it starts, or while it serves.
TEST(HttpServerLifecycle, StopAtAnyMomentEndsRun) {
    HttpOptions o;
    o.port = 0;
    {
        HttpServer s(o);
        s.bind();
        s.stop();
        s.run();  // returns at once
    }
    for (int i = 0; i < 20; ++i) {
        HttpServer s(o);
        s.bind();
        std::thread t([&] { s.run(); });
        if (i % 2) std::this_thread::sleep_for(std::chrono::milliseconds(i));
        s.stop();
        t.join();
    }
}

// Clients that connect together all complete their handshakes, even before one is accepted: the listen backlog is the
// system's, not a small one (beyond which the kernel drops handshakes and clients retry after a second).
TEST(HttpServerLifecycle, ManyConnectionsQueueBeforeAccept) {
    HttpOptions o;
    o.port = 0;
    HttpServer s(o);
    const int port = s.bind();  // listening, but run() never accepts
    constexpr int kClients = 64;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::vector<pollfd> fds;
    for (int i = 0; i < kClients; ++i) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        ASSERT_GE(fd, 0);
        ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);  // EINPROGRESS or done
        fds.push_back({fd, POLLOUT, 0});
    }
    int connected = 0;
    const auto deadline = std::chrono::steady_clock::now() + 500ms;
    for (pollfd& p : fds) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        int err = -1;
        socklen_t len = sizeof err;
        if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) == 1 &&
            ::getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
            ++connected;
        ::close(p.fd);
    }
    EXPECT_EQ(connected, kClients);
}

}  // namespace
}  // namespace tracelm::serve
