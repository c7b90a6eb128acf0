// The OpenAI-compatible HTTP server (cpp-httplib): POST /v1/chat/completions and /v1/completions (streamed as
// server-sent events or not), GET /v1/models, /health and /metrics. It listens before the model is loaded
// (/health answers 503 until set_ready) and reaches the scheduler only through a Generator, so `tracelm serve`
// plugs in the Scheduler and tests a stand-in.
//
// Each connection has one worker thread (httplib's model), so `workers` bounds the requests served at once, idle
// keep-alive connections included: size it for every stream plus monitoring. While a request waits for tokens
// (queued, prefilling), a streamed one gets an SSE comment line every `poll`, and every request checks that its
// client is still connected; a client that is gone has its request cancelled (Stream::cancel).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "serve/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace tracelm::serve {

struct HttpOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                          // 0: any free port
    std::string api_key;                      // empty: no authentication; else /v1/* needs "Authorization: Bearer KEY"
    std::string model_id;                     // the served model's name (GET /v1/models, a request's "model")
    size_t max_body_bytes = size_t{1} << 20;  // larger bodies get 413
    int workers = 20;
    std::chrono::milliseconds poll{200};
};

// The loaded model as the server needs it.
struct ServedModel {
    Tokenizer tokenizer;
    std::optional<ChatTemplate> chat_template;  // none: chat completions get a 400
    std::vector<int32_t> end_ids;               // end generation (not with ignore_eos): end_of_generation_ids
    int64_t context = 0;                        // tokens per sequence
};

// The scheduler's side, as functions.
struct Generator {
    std::function<std::shared_ptr<Stream>(GenerationRequest)> submit;  // may throw RequestError
    std::function<SchedulerStats()> stats;
};

class HttpServer {
   public:
    explicit HttpServer(HttpOptions options);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds host:port; returns the port (the one picked for port 0). Throws std::runtime_error when it cannot.
    int bind();
    // Serves until stop(); returns once every connection's worker has finished.
    void run();
    // Thread-safe; requests in flight end within `poll`.
    void stop();
    // From now on /health is 200 and completions are served.
    void set_ready(ServedModel model, Generator generator);

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tracelm::serve
