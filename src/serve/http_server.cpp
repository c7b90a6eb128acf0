#include "serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <climits>
#include <ctime>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

#include "engine/prompt.h"
#include "serve/metrics.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/text_stream.h"

namespace tracelm::serve {

using nlohmann::json;

namespace {

struct Ready {
    ServedModel model;
    Generator generator;
};

std::string random_id(const char* prefix) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
    return id;
}

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(dump(error_body(e)), "application/json");
}

// Equal without an early exit, so the time taken does not tell how much of a key was right.
bool same_key(const std::string& given, const std::string& key) {
    if (given.size() != key.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
    return diff == 0;
}

// One request between submit and its last byte: turns stream updates into the response, from httplib's content
// provider (one call per update). Cancels the request if it is dropped unfinished (client gone, server stopping).
class Job {
   public:
    Job(std::shared_ptr<Stream> stream, std::shared_ptr<const Ready> ready, const OpenAIRequest& r, ResponseMeta meta,
        int64_t prompt_tokens, std::chrono::milliseconds poll)
        : stream_(std::move(stream)),
          ready_(std::move(ready)),
          endpoint_(r.endpoint),
          streamed_(r.stream),
          include_usage_(r.include_usage),
          logprobs_(r.sampling.logprobs.has_value()),
          meta_(std::move(meta)),
          text_(ready_->model.tokenizer, r.stop),
          poll_(poll) {
        usage_.prompt_tokens = prompt_tokens;
    }
    ~Job() {
        if (!done_) stream_->cancel();
    }
    Job(const Job&) = delete;
    Job& operator=(const Job&) = delete;

    // httplib's chunked content provider: false ends the connection.
    bool pump(httplib::DataSink& sink) {
        if (!started_) {
            started_ = true;
            if (streamed_ && endpoint_ == Endpoint::ChatCompletions &&
                !write(sink, sse(chunk(endpoint_, meta_, "", Finish::None, nullptr, true))))
                return false;
        }
        const StreamUpdate u = stream_->next(poll_);
        if (u.tokens.empty() && u.finish == Finish::None) {
            // Nothing yet (queued or prefilling): make sure the client is still there.
            if (!sink.is_writable()) return false;
            return !streamed_ || write(sink, ": keep-alive\n\n");
        }
        std::vector<sampling::TokenLogprobs> batch;
        std::string text;
        const Finish finish = consume(u, text, batch);
        if (finish == Finish::Cancelled) return false;  // the scheduler is shutting down: end the connection
        return streamed_ ? send_chunk(sink, finish, u.error, text, batch) : collect(sink, finish, u.error, text, batch);
    }

   private:
    // Feeds the update's tokens to the text stream; returns how the request ends (None: not yet).
    Finish consume(const StreamUpdate& u, std::string& text, std::vector<sampling::TokenLogprobs>& batch) {
        for (size_t i = 0; i < u.tokens.size() && !text_.stopped(); ++i) {
            offsets_.push_back(text_.decoded_chars());
            text += text_.push(u.tokens[i]);
            ++usage_.completion_tokens;
            if (logprobs_ && i < u.logprobs.size()) batch.push_back(u.logprobs[i]);
        }
        Finish finish = u.finish;
        if (text_.stopped()) {
            finish = Finish::Stop;
            stream_->cancel();  // the scheduler frees the sequence; later updates are not read
        } else if (finish == Finish::Stop || finish == Finish::Length) {
            text += text_.finish();
        }
        if (finish != Finish::None) done_ = true;
        return finish;
    }

    bool send_chunk(httplib::DataSink& sink, Finish finish, const std::string& error, const std::string& text,
                    const std::vector<sampling::TokenLogprobs>& batch) {
        const bool finished = finish != Finish::None;
        if (finish == Finish::Error) {
            if (!write(sink, sse(error_body(ApiError(500, error, "server_error"))))) return false;
        } else if (!text.empty() || !batch.empty() || finished) {
            const std::vector<size_t> offsets(offsets_.end() - static_cast<std::ptrdiff_t>(batch.size()),
                                              offsets_.end());
            if (!write(sink, sse(chunk(endpoint_, meta_, text, finish, logprobs(batch, offsets))))) return false;
        }
        if (!finished) return true;
        if (include_usage_ && finish != Finish::Error && !write(sink, sse(usage_chunk(endpoint_, meta_, usage_))))
            return false;
        if (!write(sink, std::string(kSseDone))) return false;
        sink.done();
        return true;
    }

    bool collect(httplib::DataSink& sink, Finish finish, const std::string& error, const std::string& text,
                 const std::vector<sampling::TokenLogprobs>& batch) {
        answer_ += text;
        all_logprobs_.insert(all_logprobs_.end(), batch.begin(), batch.end());
        if (finish == Finish::None) return true;
        const json body = finish == Finish::Error ? error_body(ApiError(500, error, "server_error"))
                                                  : response_body(endpoint_, meta_, answer_, finish, usage_,
                                                                  logprobs(all_logprobs_, offsets_));
        if (!write(sink, dump(body))) return false;
        sink.done();
        return true;
    }

    json logprobs(const std::vector<sampling::TokenLogprobs>& lps, const std::vector<size_t>& offsets) const {
        return logprobs_ ? logprobs_json(endpoint_, ready_->model.tokenizer, lps, offsets) : json(nullptr);
    }

    static bool write(httplib::DataSink& sink, const std::string& s) { return sink.write(s.data(), s.size()); }

    std::shared_ptr<Stream> stream_;
    std::shared_ptr<const Ready> ready_;  // keeps the tokenizer the TextStream reads
    Endpoint endpoint_;
    bool streamed_, include_usage_, logprobs_;
    ResponseMeta meta_;
    TextStream text_;
    std::chrono::milliseconds poll_;
    Usage usage_;
    bool started_ = false, done_ = false;
    std::string answer_;
    std::vector<sampling::TokenLogprobs> all_logprobs_;
    std::vector<size_t> offsets_;
};

}  // namespace

struct HttpServer::Impl {
    HttpOptions opt;
    httplib::Server svr;
    int listen_fd = -1;  // the socket httplib binds (its socket-options hook sees it last)
    std::mutex mu;
    std::shared_ptr<const Ready> ready;
    bool running = false, stopping = false;  // run() is inside listen; stop() was called
    const int64_t started = static_cast<int64_t>(std::time(nullptr));

    std::shared_ptr<const Ready> current() {
        std::lock_guard<std::mutex> lock(mu);
        return ready;
    }

    explicit Impl(HttpOptions o) : opt(std::move(o)) {
        const auto workers = static_cast<size_t>(std::max(opt.workers, 1));
        svr.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
        svr.set_tcp_nodelay(true);
        svr.set_socket_options([this](int fd) {
            httplib::default_socket_options(fd);
            listen_fd = fd;
        });
        svr.set_payload_max_length(opt.max_body_bytes);

        svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (opt.api_key.empty() || req.path.rfind("/v1/", 0) != 0)
                return httplib::Server::HandlerResponse::Unhandled;
            const std::string auth = req.get_header_value("Authorization");
            const std::string bearer = "Bearer ";
            if (auth.rfind(bearer, 0) == 0 && same_key(auth.substr(bearer.size()), opt.api_key))
                return httplib::Server::HandlerResponse::Unhandled;
            send_error(res, ApiError(401,
                                     auth.empty() ? "missing API key: send the header 'Authorization: Bearer KEY'"
                                                  : "incorrect API key",
                                     "invalid_request_error", "", "invalid_api_key"));
            return httplib::Server::HandlerResponse::Handled;
        });
        // Statuses httplib sets itself (unknown route, oversized or malformed request) get a JSON body too.
        svr.set_error_handler(
            httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
                if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
                std::string message;
                std::string type = "invalid_request_error";
                if (res.status == 404)
                    message = "no route for " + req.method + " " + req.path;
                else if (res.status == 413)
                    message = "the request body is larger than " + std::to_string(opt.max_body_bytes) + " bytes";
                else if (res.status == 400)
                    message = "malformed HTTP request";
                else {
                    message = "HTTP status " + std::to_string(res.status);
                    type = "server_error";
                }
                send_error(res, ApiError(res.status, message, type));
                return httplib::Server::HandlerResponse::Handled;
            }));

        svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            if (current()) {
                res.status = 200;
                return;
            }
            send_error(res, ApiError(503, "the model is loading", "server_error"));
        });
        svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            const auto r = current();
            res.set_content(prometheus_text(r ? r->generator.stats() : SchedulerStats{}, opt.model_id),
                            "text/plain; version=0.0.4; charset=utf-8");
        });
        svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            json model = {{"id", opt.model_id}, {"object", "model"}, {"created", started}, {"owned_by", "tracelm"}};
            if (const auto r = current()) model["max_model_len"] = r->model.context;
            res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
        });
        svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
            handle(Endpoint::ChatCompletions, req, res);
        });
        svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
            handle(Endpoint::Completions, req, res);
        });
    }

    void handle(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
        try {
            complete(endpoint, req, res);
        } catch (const ApiError& e) {
            send_error(res, e);
        } catch (const std::exception& e) {
            send_error(res, ApiError(500, e.what(), "server_error"));
        }
    }

    void complete(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
        const OpenAIRequest r = parse_request(endpoint, req.body);
        if (!r.model.empty() && r.model != opt.model_id)
            throw ApiError(404,
                           "the model '" + r.model + "' does not exist (this server serves '" + opt.model_id + "')",
                           "invalid_request_error", "model", "model_not_found");
        const std::shared_ptr<const Ready> rd = current();
        if (!rd) throw ApiError(503, "the model is loading", "server_error");
        const ServedModel& m = rd->model;
        const bool chat = endpoint == Endpoint::ChatCompletions;
        const char* prompt_param = chat ? "messages" : "prompt";

        GenerationRequest g;
        if (r.prompt_ids) {
            g.prompt = *r.prompt_ids;  // the scheduler checks the ids (Engine::check_prompt): a 400 naming `prompt`
        } else {
            if (chat && !m.chat_template)
                throw invalid_param("messages", "the model has no chat template; use /v1/completions");
            g.prompt = encode_prompt(m.tokenizer, chat ? m.chat_template->apply(r.messages) : r.prompt);
        }
        const auto prompt_tokens = static_cast<int64_t>(g.prompt.size());
        const int64_t budget = r.max_tokens ? *r.max_tokens : m.context - prompt_tokens;
        g.max_new_tokens = static_cast<int>(std::clamp<int64_t>(budget, 1, INT_MAX));
        g.params = sampling::row_params(r.sampling, sampling::resolve_seed(r.sampling));
        if (!r.ignore_eos) g.stop_ids = m.end_ids;

        std::shared_ptr<Stream> stream;
        try {
            stream = rd->generator.submit(std::move(g));
        } catch (const RequestError& e) {
            throw invalid_param(prompt_param, e.what());
        }
        ResponseMeta meta{random_id(chat ? "chatcmpl-" : "cmpl-"), static_cast<int64_t>(std::time(nullptr)),
                          opt.model_id};
        auto job = std::make_shared<Job>(std::move(stream), rd, r, std::move(meta), prompt_tokens, opt.poll);
        res.set_chunked_content_provider(r.stream ? "text/event-stream" : "application/json",
                                         [job](size_t, httplib::DataSink& sink) { return job->pump(sink); });
        if (r.stream) res.set_header("Cache-Control", "no-cache");
    }
};

HttpServer::HttpServer(HttpOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
    const HttpOptions& o = impl_->opt;
    int port = o.port;
    if (o.port == 0) {
        port = impl_->svr.bind_to_any_port(o.host);
        if (port < 0) throw std::runtime_error("cannot listen on " + o.host + " (any port)");
    } else if (!impl_->svr.bind_to_port(o.host, o.port)) {
        throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port));
    }
    // httplib 0.11 listens with a backlog of 5: clients connecting together beyond that overflow the accept queue
    // (their handshakes are dropped and retried after a second, or reset). Listening again raises the backlog.
    if (::listen(impl_->listen_fd, SOMAXCONN) != 0)
        throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(port) + " with a full backlog");
    return port;
}

void HttpServer::run() {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        if (impl_->stopping) return;
        impl_->running = true;
    }
    impl_->svr.listen_after_bind();
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->running = false;
}

void HttpServer::stop() {
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->stopping = true;
    }
    // httplib's stop() does nothing before its listen loop has started, so wait for that (or for run() to end).
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(impl_->mu);
            if (!impl_->running) return;
        }
        if (impl_->svr.is_running()) {
            impl_->svr.stop();
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

void HttpServer::set_ready(ServedModel model, Generator generator) {
    auto r = std::make_shared<const Ready>(Ready{std::move(model), std::move(generator)});
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->ready = std::move(r);
}

}  // namespace tracelm::serve
