#include "cli/bench_long_context.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "cli/bench_clock.h"

namespace tracelm::cli {

template <typename F>
void StepProfileBackend::timed(const char* part, F&& f) {
    if (!profiling_) return f();
    const auto t0 = BenchClock::now();
    f();
    parts_[part] += seconds_since(t0);
}

bool StepProfileBackend::is_indexer(const Tensor& w) const {
    return std::find(indexer_weights_.begin(), indexer_weights_.end(), w.raw()) != indexer_weights_.end();
}

void StepProfileBackend::do_mla_attention(const Tensor& q_lat, const Tensor& q_pe, const Tensor& cache,
                                          const AttentionMeta& meta, const Tensor* indices, int heads, float scale,
                                          const Tensor& out) {
    timed("attention", [&] { CpuBackend::do_mla_attention(q_lat, q_pe, cache, meta, indices, heads, scale, out); });
}

void StepProfileBackend::do_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                      const AttentionMeta& meta, int heads, int kv_heads, int head_dim, float scale,
                                      const Tensor& out) {
    timed("attention",
          [&] { CpuBackend::do_attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, scale, out); });
}

void StepProfileBackend::do_sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                             const AttentionMeta& meta, const Tensor& indices, int heads, int kv_heads,
                                             int head_dim, float scale, const Tensor& out) {
    timed("attention", [&] {
        CpuBackend::do_sparse_attention(q, k_cache, v_cache, meta, indices, heads, kv_heads, head_dim, scale, out);
    });
}

void StepProfileBackend::do_dsa_indexer_paged(const Tensor& q, const Tensor& weights, const Tensor& key_cache,
                                              const AttentionMeta& meta, int heads, const Tensor& scores) {
    timed("indexer", [&] { CpuBackend::do_dsa_indexer_paged(q, weights, key_cache, meta, heads, scores); });
}

void StepProfileBackend::do_dsa_topk_causal(const Tensor& scores, const AttentionMeta& meta,
                                            const DsaTopkWorkspace& ws, const Tensor& indices) {
    timed("indexer", [&] { CpuBackend::do_dsa_topk_causal(scores, meta, ws, indices); });
}

void StepProfileBackend::do_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                                       const Tensor& out) {
    timed("indexer", [&] { CpuBackend::do_layer_norm(x, w, b, eps, out); });  // only the indexer's key norm uses it
}

void StepProfileBackend::do_rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim,
                                      const RopeSpec& rope, int head_stride) {
    // The indexer rotates part of each of its heads (a stride past the rotated part); the attention whole heads.
    timed(head_stride > head_dim ? "indexer" : "other",
          [&] { CpuBackend::do_rope_neox(x, positions, heads, head_dim, rope, head_stride); });
}

void StepProfileBackend::do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out,
                                   int64_t batch_rows) {
    timed(is_indexer(w) ? "indexer" : "other", [&] { CpuBackend::do_matmul(x, w, bias, out, batch_rows); });
}

void StepProfileBackend::do_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows) {
    timed(!outs.empty() && is_indexer(*outs[0].w) ? "indexer" : "other",
          [&] { CpuBackend::do_matmuls(x, outs, batch_rows); });
}

namespace {

struct ModeResult {
    double replay_step_s = 0, eager_step_s = 0;
    std::map<std::string, double> parts;  // seconds per eager step
};

// One sequence decoding at `context` cached positions: `profile_steps` profiled eager steps (after an untimed one),
// then, in a fresh engine, `steps` timed replays (after the eager warm-up and the capture).
ModeResult run_mode(const Model& model, Backend& backend, StepProfileBackend* profiler, const LongContextOptions& o,
                    int64_t context, bool dense) {
    EngineOptions eo = o.engine;
    eo.dense_attention = dense;
    eo.prefix_cache = false;
    eo.max_seqs = 1;
    eo.context = context + std::max(o.steps, o.profile_steps) + 4;
    const int32_t input = 1;
    const uint64_t seed = 12345 + static_cast<uint64_t>(context);
    ModeResult r;
    const auto timed_step = [&](Engine& e) {
        backend.synchronize();
        const auto t0 = BenchClock::now();
        e.step();
        backend.synchronize();
        return seconds_since(t0);
    };
    if (profiler != nullptr) {
        eo.capture = false;
        Engine eager(model, backend, eo);
        if (eager.admit_synthetic(context, input, eo.context, seed) < 0) throw std::runtime_error("no KV blocks");
        eager.step();
        profiler->reset_parts();
        profiler->set_profiling(true);
        for (int i = 0; i < o.profile_steps; ++i) r.eager_step_s += timed_step(eager) / o.profile_steps;
        profiler->set_profiling(false);
        for (const auto& [part, s] : profiler->parts()) r.parts[part] = s / o.profile_steps;
    }
    eo.capture = true;
    Engine replay(model, backend, eo);
    if (replay.admit_synthetic(context, input, eo.context, seed) < 0) throw std::runtime_error("no KV blocks");
    replay.step();  // eager warm-up
    replay.step();  // capture and first replay
    for (int i = 0; i < o.steps; ++i) r.replay_step_s += timed_step(replay) / o.steps;
    return r;
}

}  // namespace

nlohmann::json bench_long_context(const Model& model, Backend& backend, StepProfileBackend* profiler,
                                  const LongContextOptions& opt) {
    const ModelConfig& c = model.config();
    const bool indexer = c.mla && c.mla->index_topk > 0;
    if (profiler != nullptr && indexer) {
        for (const LayerWeights& L : model.weights().layers) {
            if (!L.mla || !L.mla->indexer) continue;
            profiler->mark_indexer(L.mla->indexer->wq);
            profiler->mark_indexer(L.mla->indexer->wk);
        }
    }
    // With an indexer, each context runs with its top-k selection and with dense attention; else as the flags say.
    std::vector<bool> modes = indexer ? std::vector<bool>{false, true} : std::vector<bool>{opt.engine.dense_attention};
    nlohmann::json rows = nlohmann::json::array();
    for (const int64_t ctx : opt.contexts) {
        for (const bool dense : modes) {
            const ModeResult m = run_mode(model, backend, profiler, opt, ctx, dense);
            nlohmann::json row = {{"context", ctx},
                                  {"attention", dense ? "dense" : (indexer ? "sparse" : "model")},
                                  {"decode_replay_tokens_per_s", 1.0 / m.replay_step_s},
                                  {"replay_step_ms", m.replay_step_s * 1e3}};
            if (profiler != nullptr) {
                row["eager_step_ms"] = m.eager_step_s * 1e3;
                const auto part = [&](const char* p) {
                    const auto it = m.parts.find(p);
                    return it == m.parts.end() ? 0.0 : it->second;
                };
                row["eager_attention_ms"] = part("attention") * 1e3;
                row["eager_indexer_ms"] = part("indexer") * 1e3;
                row["eager_attention_share"] = part("attention") / m.eager_step_s;
                row["eager_indexer_share"] = part("indexer") / m.eager_step_s;
            }
            rows.push_back(row);
        }
    }
    nlohmann::json j;
    j["layers"] = c.num_hidden_layers;
    if (indexer) j["index_topk"] = c.mla->index_topk;
    j["steps"] = opt.steps;
    j["rows"] = rows;
    if (indexer) {
        // Whole-step speed of the top-k selection over dense attention per context, and how the sparse attention's
        // own time grows from the shortest context to each longer one.
        nlohmann::json cmp = nlohmann::json::array();
        double first_attention = 0.0;
        for (size_t i = 0; i + 1 < rows.size(); i += 2) {
            const auto& s = rows[i];
            const auto& d = rows[i + 1];
            nlohmann::json e = {{"context", s["context"]},
                                {"sparse_over_dense_decode", s["decode_replay_tokens_per_s"].get<double>() /
                                                                 d["decode_replay_tokens_per_s"].get<double>()}};
            if (s.contains("eager_attention_ms")) {
                const double a = s["eager_attention_ms"].get<double>();
                if (i == 0) first_attention = a;
                e["sparse_attention_over_shortest"] = a / first_attention;
            }
            cmp.push_back(e);
        }
        j["sparse_vs_dense"] = cmp;
    }
    return j;
}

void print_long_context_bench(const nlohmann::json& j) {
    std::printf("%-9s %-9s %14s %12s %12s %14s %13s %15s %13s\n", "context", "attention", "replay tok/s",
                "replay ms", "eager ms", "attention ms", "indexer ms", "attention share", "indexer share");
    for (const auto& r : j["rows"]) {
        const auto num = [&](const char* k, double scale) {
            return r.contains(k) ? r[k].get<double>() * scale : -1.0;
        };
        std::printf("%-9lld %-9s %14.3f %12.1f %12.1f %14.2f %13.2f %15.3f %13.3f\n",
                    static_cast<long long>(r["context"].get<int64_t>()), r["attention"].get<std::string>().c_str(),
                    r["decode_replay_tokens_per_s"].get<double>(), r["replay_step_ms"].get<double>(),
                    num("eager_step_ms", 1), num("eager_attention_ms", 1), num("eager_indexer_ms", 1),
                    num("eager_attention_share", 1), num("eager_indexer_share", 1));
    }
    if (j.contains("sparse_vs_dense")) {
        std::printf("\n%-9s %24s %30s\n", "context", "sparse/dense decode", "sparse attention / shortest");
        for (const auto& e : j["sparse_vs_dense"])
            std::printf("%-9lld %24.2f %30.2f\n", static_cast<long long>(e["context"].get<int64_t>()),
                        e["sparse_over_dense_decode"].get<double>(),
                        e.contains("sparse_attention_over_shortest") ? e["sparse_attention_over_shortest"].get<double>()
                                                                     : -1.0);
    }
}

}  // namespace tracelm::cli
