#include "serve/metrics.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <sstream>

namespace tracelm::serve {

namespace {

// A label value with backslash, double quote and newline escaped, as the format requires.
std::string label_value(const std::string& s) {
    std::string out;
    for (const char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

// The shortest text that reads back as `v` ("0.025", "1", "2.5").
std::string number(double v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

class Writer {
   public:
    explicit Writer(const std::string& model) : labels_("model_name=\"" + label_value(model) + "\"") {}

    void gauge(const char* name, const char* help, double v) { sample(name, help, "gauge", v); }
    // An info gauge: value 1, the facts in labels (`extra`: name="value" pairs, already escaped).
    void info(const char* name, const char* help, const std::string& extra) {
        header(name, help, "gauge");
        out_ << name << '{' << labels_ << ',' << extra << "} 1\n";
    }
    void counter(const char* name, const char* help, double v) { sample(name, help, "counter", v); }

    void histogram(const char* name, const char* help, const Histogram& h) {
        header(name, help, "histogram");
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= h.bounds.size(); ++i) {
            cumulative += h.counts[i];
            const std::string le = i < h.bounds.size() ? number(h.bounds[i]) : "+Inf";
            out_ << name << "_bucket{" << labels_ << ",le=\"" << le << "\"} " << cumulative << '\n';
        }
        out_ << name << "_sum{" << labels_ << "} " << number(h.sum) << '\n';
        out_ << name << "_count{" << labels_ << "} " << h.count << '\n';
    }

    std::string text() const { return out_.str(); }

   private:
    void header(const char* name, const char* help, const char* type) {
        out_ << "# HELP " << name << ' ' << help << '\n' << "# TYPE " << name << ' ' << type << '\n';
    }
    void sample(const char* name, const char* help, const char* type, double v) {
        header(name, help, type);
        out_ << name << '{' << labels_ << "} " << number(v) << '\n';
    }

    std::string labels_;
    std::ostringstream out_;
};

}  // namespace

double kv_cache_usage(const SchedulerStats& s) {
    const auto fraction = [](int64_t used, int64_t total) {
        return total > 0 ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
    };
    return std::max(fraction(s.kv_blocks_used, s.kv_blocks_total),
                    fraction(s.kv_sliding_blocks_used, s.kv_sliding_blocks_total));
}

std::string prometheus_text(const SchedulerStats& s, const std::string& model_name) {
    Writer w(model_name);
    const auto d = [](auto v) { return static_cast<double>(v); };
    w.gauge("tracelm:num_requests_running", "Sequences decoding or prefilling.", s.running);
    w.gauge("tracelm:num_requests_waiting", "Requests queued, preempted ones included.", s.waiting);
    w.gauge("tracelm:kv_blocks_used", "KV cache blocks in use.", d(s.kv_blocks_used));
    w.gauge("tracelm:kv_blocks_total", "KV cache blocks in the pool.", d(s.kv_blocks_total));
    w.gauge("tracelm:kv_sliding_blocks_used", "Blocks of the sliding-window layers' own KV pool in use.",
            d(s.kv_sliding_blocks_used));
    w.gauge("tracelm:kv_sliding_blocks_total", "Blocks in the sliding-window layers' own KV pool (0: none).",
            d(s.kv_sliding_blocks_total));
    w.gauge("tracelm:kv_cache_usage_perc",
            "KV cache usage as a fraction (1: full): blocks in use over blocks, of the fuller pool.",
            kv_cache_usage(s));
    w.info("tracelm:cache_config_info", "The KV cache's layout: tokens per block and blocks in the pool.",
           "block_size=\"" + std::to_string(s.block_size) + "\",num_gpu_blocks=\"" +
               std::to_string(s.kv_blocks_total) + "\"");
    w.counter("tracelm:prompt_tokens_total", "Prompt tokens prefilled.", d(s.prompt_tokens));
    w.counter("tracelm:generation_tokens_total", "Tokens generated.", d(s.generated_tokens));
    w.counter("tracelm:requests_finished_total", "Requests finished.", d(s.requests_finished));
    w.counter("tracelm:num_preemptions_total", "Sequences preempted for lack of KV blocks.", d(s.preemptions));
    w.counter("tracelm:decode_steps_total", "Decode steps of the running batch.", d(s.decode_steps));
    w.counter("tracelm:decode_replays_total", "Decode steps run as a replay of a captured graph.", d(s.replays));
    w.counter("tracelm:decode_mixed_steps_total",
              "Decode steps that also computed a prompt piece in their forward (run eagerly).", d(s.mixed_steps));
    w.counter("tracelm:host_row_writes_total", "Decode rows the host rewrote between steps.", d(s.host_row_writes));
    w.counter("tracelm:steady_decode_steps_total", "Decode steps with no host write before them.", d(s.steady_steps));
    w.counter("tracelm:prefix_cache_hit_tokens_total", "Prompt tokens whose KV came from the prefix cache.",
              d(s.prefix_hit_tokens));
    w.counter("tracelm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache (whole blocks).",
              d(s.prefix_query_tokens));
    w.counter("tracelm:prefix_cache_hits_total", "Prompt tokens looked up in the prefix cache and found there.",
              d(s.prefix_hit_tokens));
    w.histogram("tracelm:time_to_first_token_seconds", "Time to first token in seconds.", s.ttft_seconds);
    w.histogram("tracelm:inter_token_latency_seconds", "Time between tokens of a request in seconds.", s.itl_seconds);
    w.histogram("tracelm:request_queue_time_seconds", "Time from a request's arrival to its first admission.",
                s.queue_seconds);
    w.histogram("tracelm:e2e_request_latency_seconds", "Time from a request's arrival to its end, in seconds.",
                s.e2e_seconds);
    return w.text();
}

}  // namespace tracelm::serve
