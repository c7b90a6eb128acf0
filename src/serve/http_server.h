// The OpenAI-compatible HTTP server (Boost.Beast on Asio): POST /v1/chat/completions and /v1/completions (streamed
// as server-sent events or not), GET /v1/models, /health and /metrics. It listens before the model is loaded
// (/health answers 503 until set_ready) and reaches the scheduler only through a Generator, so `tracelm serve`
// plugs in the Scheduler and tests a stand-in.
//
// Connections are not threads: a few io threads run every connection's asynchronous reads, writes and timers and
// never wait (an idle or slow connection costs a socket and a buffer). Request bodies are parsed, tokenized and
// submitted on a small work pool; tokens reach the connection through Stream::on_update, which posts to the
// connection's strand. Limits are enforced while reading: headers within header_timeout and max_header_bytes, the
// body within body_timeout and max_body_bytes (whatever the route or transfer encoding), at most max_connections
// at once (beyond that: 503 and close). While a request generates, a read stays pending on its socket, so a client
// that leaves has its request cancelled (Stream::cancel).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_calls/tool_calls.h"
#include "serve/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace tracelm::serve {

struct HttpOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                          // 0: any free port
    std::string api_key;                      // empty: no authentication; else every route but /health needs
                                              // "Authorization: Bearer KEY" (and /metrics unless metrics_public)
    bool metrics_public = false;              // with api_key: /metrics answers without the key
    std::string model_id;                     // the served model's name (GET /v1/models, a request's "model")
    std::vector<std::string> aliases;         // other names a request may give (GET /v1/models lists them too)
    size_t max_body_bytes = size_t{1} << 20;  // larger bodies get 413, however they are sent
    uint32_t max_header_bytes = 16 * 1024;    // request line and headers; larger get 414 / 431
    int max_connections = 512;                // beyond: 503 and close
    int io_threads = 2;                       // run the sockets; never block
    int work_threads = 2;                     // parse, tokenize and submit request bodies
    std::chrono::milliseconds header_timeout{10000};  // a request's line and headers (and an idle keep-alive wait)
    std::chrono::milliseconds body_timeout{30000};    // its body
    std::chrono::milliseconds write_timeout{30000};   // each write of a response
    // A completion not answered in full this long after its header (queue time included) ends with a 504 error (a
    // streamed one: an error chunk and [DONE]) and its sequences are freed; 0: no limit.
    std::chrono::milliseconds request_timeout{0};
    // The access log: one JSON line per request to the POST routes (id, status, tokens, queue time, time to first
    // token, duration, finish reason), from the io threads (so thread-safe); empty: none.
    std::function<void(const std::string&)> access_log;
    bool log_prompts = false;  // the lines also carry each request's body (its prompt)
    std::chrono::milliseconds poll{200};  // a streamed answer waiting for tokens sends an SSE comment this often
};

// The loaded model as the server needs it.
struct ServedModel {
    Tokenizer tokenizer;
    std::optional<ChatTemplate> chat_template;  // none: chat completions get a 400
    std::vector<int32_t> end_ids;               // end generation (not with ignore_eos): end_of_generation_ids
    int64_t context = 0;                        // tokens per sequence
    int64_t vocab_size = 0;                     // logits per row: logit_bias ids must be below it
    // Compiles response_format and the guided_* / grammar fields; null: those get a 400.
    std::shared_ptr<const grammar::Compiler> grammar;
    tools::ToolCallFormat tool_format = tools::ToolCallFormat::None;  // how the template's model writes tool calls
    // An embedding's dimensions (the final norm's width); 0: /v1/embeddings answers 400 (the model's files name a
    // pooling other than last-token, serve/pooling.h).
    int64_t hidden_size = 0;
};

// The scheduler's side, as functions.
struct Generator {
    // Scheduler::submit of a group: all or none; may throw RequestError.
    std::function<std::vector<std::shared_ptr<Stream>>(std::vector<GenerationRequest>)> submit;
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
    // Serves until stop(); returns once every connection is closed.
    void run();
    // Thread-safe: closes the listener and every connection (their requests are cancelled).
    void stop();
    // Thread-safe, the first step of a graceful stop: from now on /health answers 503 (a balancer's health check takes
    // the replica out), requests that would generate or tokenize get 503 with Retry-After, and every connection
    // closes after its current response; requests already taken go on. The listener stays open, so health checks
    // see the 503 instead of a refused connection.
    void drain();
    // Requests taken and not yet answered in full (read, queued, generating or being written).
    int in_flight() const;
    // From now on /health is 200 and completions are served.
    void set_ready(ServedModel model, Generator generator);

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tracelm::serve
