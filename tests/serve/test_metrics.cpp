// The Prometheus text of scheduler statistics, line for line.
#include <gtest/gtest.h>

#include <sstream>

#include "serve/metrics.h"

namespace tracelm::serve {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

bool has_line(const std::string& text, const std::string& line) {
    for (const std::string& l : lines_of(text))
        if (l == line) return true;
    return false;
}

TEST(Metrics, EveryStatIsAGaugeOrCounterLabelledWithTheModel) {
    SchedulerStats s;
    s.running = 3;
    s.waiting = 2;
    s.kv_blocks_used = 17;
    s.kv_blocks_total = 256;
    s.prompt_tokens = 1000;
    s.generated_tokens = 250;
    s.requests_finished = 9;
    s.preemptions = 1;
    s.decode_steps = 120;
    s.replays = 118;
    s.host_row_writes = 14;
    s.steady_steps = 100;
    const std::string t = prometheus_text(s, "smol");
    for (const char* line : {
             "# HELP tracelm:num_requests_running Sequences decoding or prefilling.",
             "# TYPE tracelm:num_requests_running gauge",
             "tracelm:num_requests_running{model_name=\"smol\"} 3",
             "tracelm:num_requests_waiting{model_name=\"smol\"} 2",
             "tracelm:kv_blocks_used{model_name=\"smol\"} 17",
             "tracelm:kv_blocks_total{model_name=\"smol\"} 256",
             "# TYPE tracelm:prompt_tokens_total counter",
             "tracelm:prompt_tokens_total{model_name=\"smol\"} 1000",
             "tracelm:generation_tokens_total{model_name=\"smol\"} 250",
             "tracelm:requests_finished_total{model_name=\"smol\"} 9",
             "tracelm:num_preemptions_total{model_name=\"smol\"} 1",
             "tracelm:decode_steps_total{model_name=\"smol\"} 120",
             "tracelm:decode_replays_total{model_name=\"smol\"} 118",
             "tracelm:host_row_writes_total{model_name=\"smol\"} 14",
             "tracelm:steady_decode_steps_total{model_name=\"smol\"} 100",
         })
        EXPECT_TRUE(has_line(t, line)) << line << "\n" << t;
}

// What the Gateway API Inference Extension's model-server protocol reads: the queue, the KV cache's use as a fraction
// (of the fuller pool), and the block layout for its prefix scorer; and vLLM's prefix-cache counters.
TEST(Metrics, GatewayMetricsHaveTheProtocolsTypesAndMeanings) {
    SchedulerStats s;
    s.kv_blocks_used = 64;
    s.kv_blocks_total = 256;
    s.kv_sliding_blocks_used = 3;
    s.kv_sliding_blocks_total = 8;
    s.block_size = 16;
    s.prefix_query_tokens = 480;
    s.prefix_hit_tokens = 320;
    EXPECT_EQ(kv_cache_usage(s), 0.375);  // the sliding pool's 3/8 over the full pool's 1/4
    s.kv_sliding_blocks_total = 0;
    EXPECT_EQ(kv_cache_usage(s), 0.25);
    s.kv_blocks_total = 0;
    EXPECT_EQ(kv_cache_usage(s), 0.0);
    s.kv_blocks_total = 256;
    const std::string t = prometheus_text(s, "m");
    for (const char* line : {
             "# TYPE tracelm:kv_cache_usage_perc gauge",
             "tracelm:kv_cache_usage_perc{model_name=\"m\"} 0.25",
             "# TYPE tracelm:cache_config_info gauge",
             "tracelm:cache_config_info{model_name=\"m\",block_size=\"16\",num_gpu_blocks=\"256\"} 1",
             "# TYPE tracelm:prefix_cache_queries_total counter",
             "tracelm:prefix_cache_queries_total{model_name=\"m\"} 480",
             "tracelm:prefix_cache_hits_total{model_name=\"m\"} 320",
             "# TYPE tracelm:request_queue_time_seconds histogram",
             "# TYPE tracelm:e2e_request_latency_seconds histogram",
         })
        EXPECT_TRUE(has_line(t, line)) << line << "\n" << t;
}

TEST(Metrics, HistogramBucketsAreCumulative) {
    SchedulerStats s;
    // Sums of these are exact in binary; 0.25 and 0.5 sit on bounds (le is inclusive).
    for (const double v : {0.0078125, 0.015625, 0.25, 0.5, 128.0}) s.ttft_seconds.observe(v);
    s.itl_seconds.observe(0.005);
    const std::string t = prometheus_text(s, "m");
    const std::string n = "tracelm:time_to_first_token_seconds";
    const std::pair<const char*, int> want[] = {{"0.01", 1}, {"0.025", 2}, {"0.05", 2}, {"0.1", 2},
                                                {"0.25", 3}, {"0.5", 4},   {"1", 4},    {"2.5", 4},
                                                {"5", 4},    {"10", 4},    {"30", 4},   {"+Inf", 5}};
    for (const auto& [le, count] : want) {
        const std::string line = n + "_bucket{model_name=\"m\",le=\"" + le + "\"} " + std::to_string(count);
        EXPECT_TRUE(has_line(t, line)) << line << "\n" << t;
    }
    EXPECT_TRUE(has_line(t, "# TYPE " + n + " histogram"));
    EXPECT_TRUE(has_line(t, n + "_sum{model_name=\"m\"} 128.7734375"));
    EXPECT_TRUE(has_line(t, n + "_count{model_name=\"m\"} 5"));
    const std::string itl = "tracelm:inter_token_latency_seconds";
    EXPECT_TRUE(has_line(t, itl + "_bucket{model_name=\"m\",le=\"0.005\"} 1"));
    EXPECT_TRUE(has_line(t, itl + "_bucket{model_name=\"m\",le=\"+Inf\"} 1"));
    EXPECT_TRUE(has_line(t, itl + "_sum{model_name=\"m\"} 0.005"));
    EXPECT_TRUE(has_line(t, itl + "_count{model_name=\"m\"} 1"));
}

TEST(Metrics, LabelValuesAreEscaped) {
    const std::string t = prometheus_text(SchedulerStats{}, "a\"b\\c\nd");
    EXPECT_TRUE(has_line(t, "tracelm:num_requests_running{model_name=\"a\\\"b\\\\c\\nd\"} 0")) << t;
    // Every line is a comment or `name{labels} value`: the text has no raw newline inside a sample.
    for (const std::string& l : lines_of(t)) EXPECT_TRUE(l.rfind("#", 0) == 0 || l.rfind("tracelm:", 0) == 0) << l;
}

}  // namespace
}  // namespace tracelm::serve
