// `tracelm serve`: the OpenAI-compatible server. It listens first (/health answers 503 while the model loads), then
// loads the model and starts the scheduler; SIGINT or SIGTERM drain it and stop it (stop_on_signals).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/registry.h"
#include "chat/chat_template.h"
#include "grammar/grammar.h"
#include "cli/chat_template_flag.h"
#include "serve/http_server.h"
#include "serve/pooling.h"
#include "serve/scheduler.h"
#include "cli/model_flags.h"
#include "cli/commands.h"
#include "checkpoint/model_cache.h"
#include "cli/model_loading.h"

namespace tracelm::cli {

namespace {
struct ServeArgs {
    ModelFlags m;
    std::string host = "127.0.0.1";
    int port = 8080;
    int max_seqs = 16;
    int max_batched_tokens = 512;
    int max_queue = serve::SchedulerOptions{}.max_waiting;
    double max_step_stretch = serve::SchedulerOptions{}.max_step_stretch;
    int prefill_steps = serve::SchedulerOptions{}.prefill_steps;
    bool no_mixed_steps = false;
    std::string api_key;
    std::vector<std::string> served_names;  // --served-model-name
    bool metrics_public = false;
    int64_t kv_blocks = 0, kv_sliding_blocks = 0;
    std::string chat_template;  // --chat-template FILE
    serve::HttpOptions http;  // the limits: max_body_bytes, max_connections, timeouts
    std::chrono::milliseconds drain_timeout{30000};  // --drain-timeout
    std::string access_log = "stderr";                // --access-log: stderr, off or a file
};

// The access log's writer: whole lines, one at a time, flushed (a crash loses none); nothing for "off".
std::function<void(const std::string&)> access_log_writer(const std::string& where) {
    if (where == "off") return {};
    std::shared_ptr<std::FILE> f;
    if (where == "stderr") {
        f = std::shared_ptr<std::FILE>(stderr, [](std::FILE*) {});
    } else {
        f = std::shared_ptr<std::FILE>(std::fopen(where.c_str(), "a"), [](std::FILE* p) {
            if (p != nullptr) std::fclose(p);
        });
        if (!f) throw std::runtime_error("cannot open the access log " + where + ": " + std::strerror(errno));
    }
    auto mu = std::make_shared<std::mutex>();
    return [f, mu](const std::string& line) {
        std::lock_guard<std::mutex> lock(*mu);
        std::fprintf(f.get(), "%s\n", line.c_str());
        std::fflush(f.get());
    };
}

// The name clients use: the model file's or folder's name (without .gguf).
std::string served_model_id(const std::string& path) {
    std::filesystem::path p = path.empty() ? default_model().file : path;
    if (!p.has_filename()) p = p.parent_path();  // a folder given with a trailing slash
    return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

// The stop on SIGINT / SIGTERM (blocked in every thread, so only this one takes them): the server drains (/health
// 503, new requests refused), what runs finishes within drain_timeout, then the scheduler ends the rest with an error
// that each client reads as its answer's last chunk (kErrorFlush to write them), and the server stops. A second
// signal stops it at once. Returns without stopping anything once `done` is set.
void stop_on_signals(const sigset_t& signals, const std::atomic<bool>& done, serve::HttpServer& server,
                     const std::atomic<serve::Scheduler*>& scheduler, std::chrono::milliseconds drain_timeout) {
    using Clock = std::chrono::steady_clock;
    constexpr auto kErrorFlush = std::chrono::seconds(5);
    const timespec tick{0, 50 * 1000 * 1000};
    while (sigtimedwait(&signals, nullptr, &tick) <= 0)
        if (done.load()) return;
    server.drain();
    std::fprintf(stderr, "draining: %d requests in flight, %.1f s to finish\n", server.in_flight(),
                 static_cast<double>(drain_timeout.count()) / 1000);
    const Clock::time_point deadline = Clock::now() + drain_timeout;
    bool aborted = false;
    while (server.in_flight() > 0) {
        if (sigtimedwait(&signals, nullptr, &tick) > 0) {
            std::fprintf(stderr, "second signal: stopping now, %d requests cut\n", server.in_flight());
            break;
        }
        const Clock::time_point now = Clock::now();
        if (!aborted && now >= deadline) {
            std::fprintf(stderr, "drain timeout: ending %d requests with an error\n", server.in_flight());
            if (serve::Scheduler* s = scheduler.load()) s->abort_all("the server is shutting down");
            aborted = true;
        }
        if (aborted && now >= deadline + kErrorFlush) break;  // clients that do not read their last chunk
    }
    server.stop();
}

int run_serve(const ServeArgs& a) {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: they inherit the mask
    signal(SIGPIPE, SIG_IGN);                       // a client gone mid-write is an error return, not a signal
    const std::string template_source = read_chat_template_flag(a.chat_template);  // before anything starts

    // Declared before the server, so destroyed after it: the server's handlers use them until run() returns.
    std::unique_ptr<Backend> device;
    std::optional<LoadedModel> lm;
    std::unique_ptr<serve::Scheduler> scheduler;

    serve::HttpOptions ho = a.http;
    ho.host = a.host;
    ho.port = a.port;
    ho.api_key = a.api_key;
    ho.metrics_public = a.metrics_public;
    ho.access_log = access_log_writer(a.access_log);
    ho.model_id = a.served_names.empty() ? served_model_id(a.m.model) : a.served_names.front();
    if (a.served_names.size() > 1) ho.aliases.assign(a.served_names.begin() + 1, a.served_names.end());
    serve::HttpServer server(ho);
    const int port = server.bind();
    std::printf("listening on http://%s:%d\n", a.host.c_str(), port);
    std::fflush(stdout);

    std::thread http([&] { server.run(); });
    std::atomic<bool> done{false};
    std::atomic<serve::Scheduler*> running_scheduler{nullptr};
    std::thread watcher([&] { stop_on_signals(signals, done, server, running_scheduler, a.drain_timeout); });
    const auto shut_down = [&] {
        server.stop();
        http.join();
        done = true;
        watcher.join();
    };
    try {
        device = make_backend(a.m.backend, a.m.backend_options());
        // A server is there for throughput: the fast numerics by default, as accurate as llama.cpp's order (fewer
        // roundings) and still batch-invariant; --numerics ggml serves llama.cpp's bits.
        const Numerics numerics = a.m.numerics_given->count() > 0              ? a.m.numerics
                                  : device->capabilities().repacked_faster ? Numerics::Fast
                                                                           : Numerics::Ggml;
        serve::SchedulerOptions so;
        so.max_seqs = a.max_seqs;
        so.max_batched_tokens = a.max_batched_tokens;
        so.max_step_stretch = a.max_step_stretch;
        so.prefill_steps = a.prefill_steps;
        so.mixed_steps = !a.no_mixed_steps;
        so.max_waiting = a.max_queue;
        const EngineOptions eo = a.m.engine_options();
        so.context = eo.context;
        so.kv_dtype = eo.kv_dtype;
        so.kv_blocks = a.kv_blocks;
        so.kv_sliding_blocks = a.kv_sliding_blocks;
        so.prefix_cache = eo.prefix_cache;
        lm = load_model(a.m.model, *device, numerics, serve::engine_options(so));
        scheduler = std::make_unique<serve::Scheduler>(*lm->model, *device, so);
        running_scheduler = scheduler.get();

        const Tokenizer& tok = lm->tokenizer;
        const int64_t vocab = lm->model->config().vocab_size;
        serve::ServedModel m{tok, std::nullopt, lm->end_ids, scheduler->context(), vocab,
                             std::make_shared<const grammar::Compiler>(tok, vocab, lm->end_ids)};
        if (!tok.chat_template().empty() || !template_source.empty()) {
            m.chat_template = ChatTemplate::for_tokenizer(tok, template_source);
            m.tool_format = tools::detect_format(template_source.empty() ? tok.chat_template() : template_source);
        }
        const serve::Pooling pooling =
            lm->model->gguf() ? serve::gguf_pooling(*lm->model->gguf()) : serve::folder_pooling(a.m.model);
        if (serve::embeds(pooling)) m.hidden_size = lm->model->config().hidden_size;
        const tools::ToolCallFormat tool_format = m.tool_format;
        serve::Scheduler& s = *scheduler;
        server.set_ready(std::move(m),
                         {[&s](std::vector<serve::GenerationRequest> r) { return s.submit(std::move(r)); },
                          [&s] { return s.stats(); }});
        std::fprintf(stderr, "ready: %s (numerics %s, weights %s, KV cache %s, tool calls %s)\n", ho.model_id.c_str(),
                     numerics == Numerics::Fast ? "fast" : "ggml", weight_types(*lm->model).c_str(),
                     std::string(dtype_name(scheduler->kv_dtype())).c_str(), tools::format_name(tool_format));
    } catch (...) {
        shut_down();
        throw;
    }
    http.join();  // until a signal stops the server
    done = true;
    watcher.join();
    std::fprintf(stderr, "stopped\n");
    return 0;
}
}  // namespace

Action add_serve(CLI::App& app) {
    auto a = std::make_shared<ServeArgs>();
    add_model_flags(app, a->m, {.numerics_default = "fast where it runs faster (cpu with AVX2), else ggml"});
    app.add_option("--host", a->host, "address to listen on (default: loopback only)");
    app.add_option("--port", a->port, "port to listen on (0: any free port, printed)")->check(CLI::Range(0, 65535));
    app.add_option("--max-seqs", a->max_seqs, "sequences decoded together")->check(CLI::Range(1, 1024));
    app.add_option("--max-batched-tokens", a->max_batched_tokens,
                   "tokens computed per scheduler step, one per decoding stream and the rest prompt pieces (lower: "
                   "steadier inter-token latency while prompts arrive; higher: shorter time to first token)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--max-step-stretch", a->max_step_stretch,
                   "a step that carries prompt pieces takes at most this many times the running batch's decode step, "
                   "beyond the prompt tokens that keep up with the rate prompts arrive at (lower: steadier inter-token "
                   "latency while a wave of prompts arrives; higher: shorter time to first token and more throughput "
                   "then; 0: only --max-batched-tokens bounds the pieces)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 100.0));
    app.add_option("--prefill-steps", a->prefill_steps,
                   "a prompt computed in decode steps is spread evenly over this many of them from its admission, "
                   "as far as --max-step-stretch allows but no slower than prompts arrive (lower: shorter time to "
                   "first token; higher: steadier inter-token latency; 0: each step carries all the stretch allows)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_flag("--no-mixed-steps", a->no_mixed_steps,
                 "give each prompt piece a forward of its own instead of computing it in the decode step's forward");
    app.add_option("--max-queue", a->max_queue,
                   "requests waiting for a sequence slot, at most; beyond: 503 with Retry-After (a burst cannot grow "
                   "memory without bound)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--served-model-name", a->served_names,
                   "the model's name(s) in the API: requests may give any, answers and /metrics carry the first "
                   "(default: the model file's or folder's name)")
        ->expected(1, 16)
        ->check([](const std::string& v) { return v.empty() ? std::string("an empty model name") : std::string(); });
    app.add_option("--api-key", a->api_key, "require 'Authorization: Bearer KEY' on every route but /health")
        ->envname("TRACELM_API_KEY");
    app.add_flag("--metrics-public", a->metrics_public, "with --api-key: /metrics answers without the key");
    app.add_option("--max-body-bytes", a->http.max_body_bytes,
                   "larger request bodies get 413, read no further (Content-Length or chunked)")
        ->capture_default_str()
        ->check(CLI::Range(size_t{1}, size_t{1} << 30));
    app.add_option("--max-connections", a->http.max_connections,
                   "connections open at once; more are answered 503 and closed")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    const auto seconds = [](std::chrono::milliseconds& ms) {
        return [&ms](double s) { ms = std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
    };
    app.add_option_function<double>("--header-timeout", seconds(a->http.header_timeout),
                                     "seconds for a request's line and headers, and for an idle keep-alive "
                                     "connection (default 10)")
        ->check(CLI::Range(0.1, 3600.0));
    app.add_option_function<double>("--body-timeout", seconds(a->http.body_timeout),
                                     "seconds for a request's body (default 30)")
        ->check(CLI::Range(0.1, 3600.0));
    app.add_option_function<double>("--request-timeout", seconds(a->http.request_timeout),
                                     "seconds a completion may take from its arrival, queue included; then it ends "
                                     "with a 504 error (streamed: an error chunk) and its sequences are freed "
                                     "(default 0: no limit)")
        ->check(CLI::Range(0.0, 86400.0));
    app.add_option_function<double>("--drain-timeout", seconds(a->drain_timeout),
                                     "on SIGTERM or SIGINT: /health turns 503 and new requests are refused at once; "
                                     "running ones get this many seconds to finish, then end with an error chunk, "
                                     "and the server exits 0 (a second signal: at once; default 30)")
        ->check(CLI::Range(0.0, 3600.0));
    app.add_option("--access-log", a->access_log,
                   "one JSON line per API request (id, status, tokens, queue time, time to first token, duration, "
                   "finish reason): stderr, off, or a file to append to")
        ->capture_default_str();
    app.add_flag("--log-prompts", a->http.log_prompts, "the access log also carries each request's body");
    app.add_option("--kv-blocks", a->kv_blocks, "KV cache blocks in the pool (default: max-seqs full contexts)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
    app.add_option("--kv-sliding-blocks", a->kv_sliding_blocks,
                   "blocks in the sliding-window layers' own pool (Gemma 3; default: each sequence's window and one "
                   "prefill chunk, plus 4 cached windows per sequence)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
    add_chat_template_flag(app, a->chat_template);
    return [a] { return run_serve(*a); };
}

}  // namespace tracelm::cli
