// The serving path when the device fails (a backend whose uploads or replays throw on demand,
// support/fault_injecting_backend.h): a failure ends the request it belongs to (a failed decode step: the running
// set) with an error, never the server; the KV blocks and their references all come back, and later requests give
// what they give alone.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "serve/http_server.h"
#include "serve/scheduler.h"
#include "support/engine_probe.h"
#include "support/fault_injecting_backend.h"
#include "support/http_client.h"
#include "support/qwen3_tokenizer.h"
#include "support/scheduler_support.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using serve::Finish;
using serve::GenerationRequest;
using serve::Scheduler;
using serve::SchedulerOptions;
using testing::alone;
using testing::drain;
using testing::FaultInjectingBackend;
using testing::Outcome;
using testing::prompt_of;

GenerationRequest request(int i, int prompt_len, int max_new) {
    GenerationRequest r;
    r.prompt = prompt_of(i, prompt_len);
    r.max_new_tokens = max_new;
    return r;
}

// Reads a stream until its first token (or its end).
void wait_first_token(serve::Stream& s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
        const serve::StreamUpdate u = s.next(std::chrono::milliseconds(200));
        if (!u.tokens.empty() || u.finish != Finish::None) return;
    }
    FAIL() << "no first token";
}

void expect_nothing_held(const Scheduler& s) {
    ASSERT_TRUE(testing::wait_for_stats(s, [](const auto& st) { return st.running == 0 && st.waiting == 0; }));
    EXPECT_EQ(s.stats().kv_blocks_used, 0);
}

// The tiny model on a backend that fails on demand.
class SchedulerFaults : public ::testing::Test {
   protected:
    SchedulerOptions options(int max_seqs, int64_t context) const {
        SchedulerOptions o;
        o.max_seqs = max_seqs;
        o.context = context;
        return o;
    }
    void expect_alone(const GenerationRequest& r, const Outcome& got, int64_t context) {
        EXPECT_EQ(got.finish, Finish::Length) << got.error;
        EXPECT_EQ(got.tokens, alone(*model, be, r, context));
    }

    FaultInjectingBackend be{2};
    const std::unique_ptr<Model> model = Model::load(testing::generated_checkpoint("tiny", 7, DType::F32), be);
};

// A decode step that fails ends every running request with the error; the scheduler goes on serving.
TEST_F(SchedulerFaults, AFailedDecodeStepEndsTheRunningRequestsAndServingGoesOn) {
    const SchedulerOptions o = options(4, 256);
    Scheduler s(*model, be, o);
    std::vector<std::shared_ptr<serve::Stream>> streams;
    for (int i = 0; i < 3; ++i) streams.push_back(s.submit(request(i, 10 + 5 * i, 230)));
    for (auto& st : streams) wait_first_token(*st);
    be.fail_replays(1);
    for (auto& st : streams) {
        const Outcome got = drain(*st);
        EXPECT_EQ(got.finish, Finish::Error);
        EXPECT_NE(got.error.find("injected device error: replay"), std::string::npos) << got.error;
    }
    EXPECT_EQ(be.injected(), 1);
    expect_nothing_held(s);
    for (int i = 3; i < 5; ++i) {
        const GenerationRequest r = request(i, 12, 20);
        const Outcome got = drain(*s.submit(r));
        expect_alone(r, got, o.context);
    }
    expect_nothing_held(s);
}

// A prompt forward that fails ends that request alone: the one decoding beside it completes as it would alone. The
// piece in a forward of its own, and in the decode step's forward (a mixed step), whose piece inputs are written
// before anything runs.
TEST_F(SchedulerFaults, AFailedPromptForwardEndsOnlyItsRequest) {
    for (const bool mixed : {false, true}) {
        SCOPED_TRACE(mixed ? "mixed steps" : "a forward of its own");
        SchedulerOptions o = options(4, 256);
        o.mixed_steps = mixed;
        Scheduler s(*model, be, o);
        const GenerationRequest r1 = request(1, 10, 150);
        const std::shared_ptr<serve::Stream> decoding = s.submit(r1);
        Outcome first;
        {
            const serve::StreamUpdate u = decoding->next(std::chrono::seconds(60));
            first.tokens = u.tokens;
            ASSERT_FALSE(first.tokens.empty());
        }
        const std::string input = mixed ? "mixed.token_ids" : "prefill.token_ids";
        be.fail_uploads(input, 1);
        const Outcome failed = drain(*s.submit(request(2, 20, 10)));
        EXPECT_EQ(failed.finish, Finish::Error);
        EXPECT_NE(failed.error.find("injected device error: upload into '" + input + "'"), std::string::npos)
            << failed.error;
        Outcome rest = drain(*decoding);
        rest.tokens.insert(rest.tokens.begin(), first.tokens.begin(), first.tokens.end());
        expect_alone(r1, rest, o.context);
        expect_nothing_held(s);
        const GenerationRequest r3 = request(2, 20, 10);
        expect_alone(r3, drain(*s.submit(r3)), o.context);
    }
}

// Admission writes the device's step counter when nothing decodes yet. When that write fails, the request being
// admitted ends with the error and holds nothing; the request still prefilling beside it is untouched, and the
// same request submitted again is served.
TEST_F(SchedulerFaults, ARequestWhoseAdmissionFailsEndsAloneAndTheOthersGoOn) {
    SchedulerOptions o = options(4, 512);
    o.max_batched_tokens = 3;  // the first request's 400-token prompt takes over a hundred steps
    Scheduler s(*model, be, o);
    be.fail_uploads("decode.step", 1, /*skip=*/1);  // the first admission's write goes through
    const GenerationRequest r1 = request(1, 400, 12), r2 = request(2, 9, 12);
    const std::shared_ptr<serve::Stream> first = s.submit(r1);
    const Outcome failed = drain(*s.submit(r2));
    EXPECT_EQ(failed.finish, Finish::Error);
    EXPECT_NE(failed.error.find("'decode.step'"), std::string::npos) << failed.error;
    expect_alone(r1, drain(*first), o.context);
    expect_nothing_held(s);
    expect_alone(r2, drain(*s.submit(r2)), o.context);
}

// release() changes host state only; the device write that makes the row inert comes before the next step. When
// that write fails, the step fails without running; the next one writes it and runs, the remaining row goes on as
// it would alone, and every block's references come back to zero (a retried release never drops them twice).
TEST_F(SchedulerFaults, AFailedInertWriteFailsOneStepAndIsRetried) {
    EngineOptions opt;
    opt.max_seqs = 2;
    opt.context = 128;
    Engine e(*model, be, opt);
    const GenerationRequest r0 = request(0, 21, 4), r1 = request(1, 13, 40);
    std::vector<int32_t> got;
    int32_t first = 0;
    ASSERT_EQ(e.admit(r0.prompt, {}, r0.params, 0), 0);
    while (!e.prefill(0, &first)) {
    }
    ASSERT_EQ(e.admit(r1.prompt, {}, r1.params, 0), 1);
    while (!e.prefill(1, &first)) {
    }
    got.push_back(first);
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(e.grow().empty());
        e.step();
        got.push_back(e.sampled()[1]);
    }
    e.release(0);
    e.release(0);  // a retry does nothing
    be.fail_uploads("block_tables", 1);
    ASSERT_TRUE(e.grow().empty());
    EXPECT_THROW(e.step(), std::runtime_error);
    while (static_cast<int>(got.size()) < r1.max_new_tokens) {
        ASSERT_TRUE(e.grow().empty());
        e.step();
        got.push_back(e.sampled()[1]);
    }
    e.release(1);
    EXPECT_EQ(got, alone(*model, be, r1, opt.context));
    EXPECT_EQ(e.kv_blocks_used(), 0);
    const PrefixCache& cache = testing::EngineProbe(e).prefix_cache();
    for (int32_t b = 0; b < cache.num_blocks(); ++b) EXPECT_EQ(cache.state(b).refs, 0);
}

// Over HTTP: a request whose decode step fails gets an OpenAI-shaped server error (in the stream, an error event
// before [DONE]); the server keeps answering, and the next request is served.
TEST_F(SchedulerFaults, TheServerAnswersAFailedStepWithAServerErrorAndGoesOn) {
    using nlohmann::json;
    Scheduler s(*model, be, options(2, 128));
    serve::HttpOptions ho;
    ho.host = "127.0.0.1";
    ho.port = 0;
    ho.model_id = "tiny";
    serve::HttpServer server(ho);
    const int port = server.bind();
    std::thread http([&] { server.run(); });
    server.set_ready(serve::ServedModel{testing::qwen3_tokenizer(), std::nullopt, {}, s.context(), 0, nullptr},
                     {[&s](std::vector<GenerationRequest> r) { return s.submit(std::move(r)); },
                      [&s] { return s.stats(); }});
    const auto post = [port](const std::string& body) {
        return testing::http_request(port, "POST", "/v1/completions", body);
    };

    be.fail_replays(1);
    const auto streamed = post(R"({"prompt": "Hello", "max_tokens": 20, "stream": true})");
    ASSERT_TRUE(streamed);
    EXPECT_EQ(streamed->status, 200);
    // The first token comes from the prompt's forward; the first decode step fails.
    const std::string& body = streamed->body;
    const size_t error_at = body.find("data: {\"error\"");
    ASSERT_NE(error_at, std::string::npos) << body;
    const size_t error_end = body.find("\n\n", error_at);
    const json error = json::parse(body.substr(error_at + 6, error_end - error_at - 6)).at("error");
    EXPECT_EQ(error.at("type"), "server_error");
    EXPECT_NE(error.at("message").get<std::string>().find("injected device error"), std::string::npos);
    EXPECT_EQ(body.substr(error_end + 2), "data: [DONE]\n\n");

    const auto health = testing::http_request(port, "GET", "/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    const auto next = post(R"({"prompt": "Hello", "max_tokens": 5})");
    ASSERT_TRUE(next);
    EXPECT_EQ(next->status, 200) << next->body;
    const json answer = json::parse(next->body);
    EXPECT_EQ(answer.at("choices").at(0).at("finish_reason"), "length") << next->body;
    EXPECT_EQ(answer.at("usage").at("completion_tokens"), 5);
    server.stop();
    http.join();
    expect_nothing_held(s);
}

}  // namespace
}  // namespace tracelm
