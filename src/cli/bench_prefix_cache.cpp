#include "cli/bench_prefix_cache.h"

#include <algorithm>
#include <cstdio>

#include "cli/bench_clock.h"
#include "engine/engine.h"

namespace tracelm::cli {

std::vector<int32_t> random_prompt(int n, int vocab_size, uint32_t seed) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    uint32_t x = seed;
    for (auto& id : ids) {
        x = x * 1664525u + 1013904223u;
        id = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(std::min(vocab_size, 150000)));
    }
    return ids;
}

namespace {
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2.0;
}
}  // namespace

nlohmann::json bench_prefix_cache(const Model& model, Backend& backend, const PrefixBenchOptions& opt) {
    const int vocab = model.config().vocab_size;
    const std::vector<int32_t> system = random_prompt(opt.system_tokens, vocab, 12345);
    EngineOptions eo;
    eo.kv_dtype = opt.kv_dtype;
    eo.context = opt.system_tokens + opt.turn_tokens + 1;
    eo.prefix_cache = true;
    Engine on(model, backend, eo);
    eo.prefix_cache = false;
    Engine off(model, backend, eo);

    // Time to first token: the prompt's prefill and the first sampled id on the host.
    auto ttft = [&](Engine& e, const std::vector<int32_t>& prompt, int32_t& first) {
        backend.synchronize();
        const auto t0 = BenchClock::now();
        first = e.start({prompt}, 1).at(0);
        const double s = seconds_since(t0);
        e.finish();
        return s;
    };
    // Request 0 fills the cache (its time is the cold one); then on and off alternate per request, so that both see
    // the same machine (a shared VM's speed drifts over seconds).
    int32_t first_on = 0, first_off = 0;
    std::vector<int32_t> prompt = system;
    const std::vector<int32_t> turn0 = random_prompt(opt.turn_tokens, vocab, 1);
    prompt.insert(prompt.end(), turn0.begin(), turn0.end());
    const double cold = ttft(on, prompt, first_on);
    std::vector<double> t_on, t_off;
    bool tokens_match = true;
    for (int i = 1; i <= opt.turns; ++i) {
        prompt.resize(system.size());
        const std::vector<int32_t> turn = random_prompt(opt.turn_tokens, vocab, static_cast<uint32_t>(i + 1));
        prompt.insert(prompt.end(), turn.begin(), turn.end());
        t_on.push_back(ttft(on, prompt, first_on));
        t_off.push_back(ttft(off, prompt, first_off));
        tokens_match = tokens_match && first_on == first_off;
    }
    const PrefixCacheStats& st = on.prefix_stats();
    nlohmann::json j;
    j["system_tokens"] = opt.system_tokens;
    j["turn_tokens"] = opt.turn_tokens;
    j["turns"] = opt.turns;
    j["kv_dtype"] = std::string(dtype_name(on.kv_dtype()));
    j["ttft_cold_ms"] = cold * 1e3;
    j["ttft_cached_ms"] = median(t_on) * 1e3;
    j["ttft_uncached_ms"] = median(t_off) * 1e3;
    j["ttft_uncached_over_cached"] = median(t_off) / median(t_on);
    j["hit_blocks"] = st.hit_blocks;
    j["hit_tokens"] = st.hit_tokens;
    j["evictions"] = st.evictions;
    j["tokens_match"] = tokens_match;
    j["per_turn_ms"] = nlohmann::json::array();
    for (size_t i = 0; i < t_on.size(); ++i) {
        j["per_turn_ms"].push_back({{"cached", t_on[i] * 1e3}, {"uncached", t_off[i] * 1e3}});
    }
    return j;
}

void print_prefix_bench(const nlohmann::json& j) {
    std::printf("%-28s %14s\n", "metric", "value");
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.value().is_array()) continue;
        std::printf("%-28s %14s\n", it.key().c_str(),
                    it.value().is_string() ? it.value().get<std::string>().c_str() : it.value().dump().c_str());
    }
    std::printf("\n%-6s %14s %14s\n", "turn", "cached ms", "uncached ms");
    int turn = 1;
    for (const auto& t : j["per_turn_ms"]) {
        std::printf("%-6d %14.2f %14.2f\n", turn++, t["cached"].get<double>(), t["uncached"].get<double>());
    }
}

}  // namespace tracelm::cli
