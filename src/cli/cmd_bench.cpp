#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/registry.h"
#include "engine/engine.h"
#include "cli/model_flags.h"
#include "cli/bench_clock.h"
#include "cli/bench_long_context.h"
#include "cli/bench_prefix_cache.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "checkpoint/data_dir.h"
#ifdef TRACELM_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace tracelm::cli {

namespace {
struct BenchArgs {
    ModelFlags m;
    int prompt_tokens = 128;
    int gen_tokens = 128;
    bool json = false;
    int rounds = 3;
    std::string llamacpp_python = "python3";
    int shared_prefix = 0;  // > 0: the prefix-cache TTFT mode
    int turns = 8;
    int batch = 1;  // sequences decoded together (the decode graph's batch bucket)
    std::vector<int64_t> synthetic_context;  // non-empty: the long-context mode (bench_long_context.h)
};

// Best-of-5 read bandwidth over a 1 GiB buffer with `threads` threads, each sweeping its share. The buffer is
// backend memory, like the weights, so both are read through the same kind of pages.
double measure_read_bandwidth(cpu::CpuBackend& backend) {
    const size_t bytes = size_t{1} << 30;
    const int threads = backend.threads();
    Buffer* buf = backend.alloc(bytes, "bandwidth sweep");
    auto* data = static_cast<unsigned char*>(buf->data);
    std::memset(data, 1, bytes);
    double best = 0.0;
    std::vector<double> sink(static_cast<size_t>(threads));
    for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = BenchClock::now();
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
            pool.emplace_back([&, t] {
                const size_t b = bytes * static_cast<size_t>(t) / static_cast<size_t>(threads);
                const size_t e = bytes * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
                sink[static_cast<size_t>(t)] += cpu::read_sweep(data + b, e - b);
            });
        }
        for (auto& th : pool) th.join();
        best = std::max(best, static_cast<double>(bytes) / seconds_since(t0));
    }
    if (sink[0] < 0) std::puts("");  // keeps the sweeps observable
    backend.free(buf);
    return best;
}

// Untimed decode steps of the replayed run: the eager warm step and the capture with its first replay.
constexpr int kReplayWarmSteps = 2;

struct DecodeRun {
    double prefill_tok_s = 0, decode_tok_s = 0, host_us_per_step = 0, step_us = 0;
    std::vector<int32_t> tokens;
    size_t graph_ops = 0;
};

// Wall time, enqueue time and host time outside kernels of timed decode steps.
struct StepTimes {
    double wall = 0, enqueue = 0, busy = 0;
    int steps = 0;
};

// One decode step of `engine`, timed to completion. Host time: on the CPU the wall time outside the pool's
// dispatches; on a device, which runs the step asynchronously, the time to enqueue it.
void timed_step(Engine& engine, Backend& backend, StepTimes& t) {
    const auto* cpu_backend = dynamic_cast<const cpu::CpuBackend*>(&backend);
    const double busy0 = cpu_backend != nullptr ? cpu_backend->busy_seconds() : 0.0;
    backend.synchronize();
    const auto t0 = BenchClock::now();
    engine.step();
    t.enqueue += seconds_since(t0);
    backend.synchronize();
    t.wall += seconds_since(t0);
    t.busy += cpu_backend != nullptr ? cpu_backend->busy_seconds() - busy0 : 0.0;
    ++t.steps;
}

DecodeRun summarize(const StepTimes& t, bool cpu, int batch) {
    DecodeRun r;
    if (t.steps > 0) {
        r.decode_tok_s = batch * t.steps / t.wall;
        r.step_us = t.wall / t.steps * 1e6;
        r.host_us_per_step = (cpu ? t.wall - t.busy : t.enqueue) / t.steps * 1e6;
    }
    return r;
}

// The sampled decode the bench times beside greedy decode (a common chat setting), with a fixed seed.
sampling::RowParams bench_sampling() {
    sampling::RowParams p;
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.seed_lo = 1;
    return p;
}

struct DecodeRuns {
    DecodeRun eager, replay, sampled;  // greedy eager, greedy replayed, sampled replayed
};

// Readies a fresh engine as llama-bench's warm-up run readies llama.cpp: the whole KV pool written once, then an
// untimed prefill of a prompt as long that shares no cached block with `prompt`. The system maps the pool's and the
// activations' pages on first write, which would otherwise land in the timed prefill (a server writes its pool
// before its first request, and pays for the activations' pages once).
void warm_prefill(Engine& e, const std::vector<int32_t>& prompt, int64_t vocab) {
    e.touch_kv();
    std::vector<int32_t> other(prompt);
    for (int32_t& id : other) id = static_cast<int32_t>((id + 1) % vocab);
    e.start({other}, 1);
    e.finish();
}

// Eager, captured and captured sampled decode of the same prompt, their timed steps alternating (eager,
// replay, sampled, eager, ...) so that all see the same machine: on a shared VM speed drifts over seconds,
// which would bias runs made one after the other. Untimed: each engine's warm-up prefill, the eager warm step, and
// each capture with its first replay.
DecodeRuns run_decode_runs(const Model& model, Backend& backend, const std::vector<std::vector<int32_t>>& prompts,
                           const EngineOptions& base, int gen) {
    const std::vector<int32_t>& prompt = prompts[0];
    const int batch = static_cast<int>(prompts.size());
    EngineOptions opt = base;
    opt.context = static_cast<int64_t>(prompt.size()) + gen;
    opt.max_seqs = batch;
    opt.capture = false;
    Engine eager(model, backend, opt);
    opt.capture = true;
    Engine replay(model, backend, opt);
    Engine sampled(model, backend, opt);
    for (Engine* e : {&eager, &replay, &sampled}) warm_prefill(*e, prompt, model.config().vocab_size);
    DecodeRuns out;
    std::vector<std::vector<int32_t>> first;
    for (Engine* e : {&eager, &replay}) {
        const auto t0 = BenchClock::now();
        first.push_back(e->start(prompts, gen));
        (e == &eager ? out.eager : out.replay).prefill_tok_s =
            static_cast<double>(prompt.size()) * batch / seconds_since(t0);
    }
    sampled.start(prompts, gen, std::vector<sampling::RowParams>(prompts.size(), bench_sampling()));
    eager.step();
    for (int i = 0; i < kReplayWarmSteps; ++i) {
        replay.step();
        sampled.step();
    }
    StepTimes te, tr, ts;
    const int timed = gen - 1 - kReplayWarmSteps;
    for (int i = 0; i < timed; ++i) {
        timed_step(eager, backend, te);
        timed_step(replay, backend, tr);
        timed_step(sampled, backend, ts);
    }
    for (int i = 1 + timed; i < gen - 1; ++i) eager.step();  // the step the replayed run spent on its capture
    const bool cpu = dynamic_cast<const cpu::CpuBackend*>(&backend) != nullptr;
    const double prefill_e = out.eager.prefill_tok_s, prefill_r = out.replay.prefill_tok_s;
    out.eager = summarize(te, cpu, batch);
    out.replay = summarize(tr, cpu, batch);
    out.sampled = summarize(ts, cpu, batch);
    out.eager.prefill_tok_s = prefill_e;
    out.replay.prefill_tok_s = prefill_r;
    for (auto [e, r] : {std::pair{&eager, &out.eager}, std::pair{&replay, &out.replay}}) {
        r->tokens = first[e == &eager ? 0 : 1];
        const auto hist = e->history(gen - 1);
        r->tokens.insert(r->tokens.end(), hist.begin(), hist.end());
        r->graph_ops = e->graph_ops();
    }
    return out;
}

// Runs argv[0] (searched in PATH) with stdout and stderr into one pipe; returns the exit status (127 when it
// could not be started, 128 + signal when killed) and the output.
std::pair<int, std::string> run_process(const std::vector<std::string>& args) {
    int fds[2];
    if (pipe(fds) != 0) return {127, "pipe failed"};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<char*> argv;
    for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    std::string out;
    if (rc == 0) {
        char buf[4096];
        ssize_t n;
        while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    if (rc != 0) return {127, std::strerror(rc)};
    int status = 0;
    waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

struct LlamaCppRun {
    std::string skipped;  // why there are no numbers; empty when it ran
    std::string version;
    double prefill_tok_s = 0, decode_tok_s = 0;
    std::vector<int32_t> tokens;
};

// llama.cpp (llama-cpp-python under `python`) on the same GGUF file, prompt, thread count and number of greedy
// tokens, through scripts/llamacpp_bench.py, which times decode over the same steps as the replayed run.
LlamaCppRun run_llamacpp(const std::string& python, const std::string& model, int threads,
                         const std::vector<int32_t>& prompt, int gen, int warm) {
    LlamaCppRun r;
    std::string script;
    try {
        script = data_path("llamacpp_bench.py");
    } catch (const std::exception& e) {
        r.skipped = e.what();
        return r;
    }
    char request[] = "/tmp/tracelm_llamacpp_XXXXXX";
    const int fd = mkstemp(request);
    if (fd < 0) {
        r.skipped = "cannot create a temporary file";
        return r;
    }
    close(fd);
    const nlohmann::json req = {{"model", std::filesystem::absolute(model).string()}, {"threads", threads},
                                {"prompt", prompt}, {"gen_tokens", gen}, {"warm_steps", warm}};
    std::ofstream(request) << req.dump();
    const auto [code, out] = run_process({python, script, request});
    std::filesystem::remove(request);
    const std::string marker = "llamacpp-bench: ";
    const size_t at = out.rfind(marker);
    const auto j = at == std::string::npos ? nlohmann::json()
                                           : nlohmann::json::parse(out.substr(at + marker.size()), nullptr, false);
    if (!j.is_object() || j.contains("error")) {
        // The script's error, else the last line the process printed.
        std::string why = j.is_object() ? j["error"].get<std::string>() : out;
        if (!j.is_object()) {
            while (!why.empty() && why.back() == '\n') why.pop_back();
            why = why.substr(why.rfind('\n') + 1);
            if (why.empty()) why = "exit status " + std::to_string(code);
        }
        r.skipped = python + ": " + why;
        return r;
    }
    r.version = j.value("version", "");
    r.prefill_tok_s = j.at("prefill_tokens_per_s").get<double>();
    r.decode_tok_s = j.at("decode_tokens_per_s").get<double>();
    r.tokens = j.at("tokens").get<std::vector<int32_t>>();
    return r;
}

int run_long_context_bench(const BenchArgs& a) {
    if (a.shared_prefix > 0 || a.batch != 1)
        throw std::runtime_error("--synthetic-context decodes one sequence; --shared-prefix and --batch do not apply");
    LongContextOptions o;
    o.contexts = a.synthetic_context;
    o.steps = a.gen_tokens;
    o.engine = a.m.engine_options();
    EngineOptions fit = o.engine;
    fit.context = *std::max_element(o.contexts.begin(), o.contexts.end()) + a.gen_tokens + 4;
    StepProfileBackend* profiler = nullptr;
    std::unique_ptr<Backend> device;
    if (a.m.backend == "cpu") {
        auto p = std::make_unique<StepProfileBackend>(a.m.threads > 0 ? a.m.threads : cpu::ThreadPool::default_threads());
        profiler = p.get();
        device = std::move(p);
    } else {
        device = make_backend(a.m.backend, a.m.backend_options());
    }
    require_fits(a.m.model, *device, fit);
    const auto model = Model::load(a.m.model, *device, {}, a.m.numerics);
    nlohmann::json j = bench_long_context(*model, *device, profiler, o);
    j["model"] = a.m.model;
    j["backend"] = device->name();
    if (profiler != nullptr) {
        j["isa"] = cpu::isa_name(cpu::active_isa());
        j["threads"] = profiler->threads();
    }
    j["kv_dtype"] = std::string(dtype_name(kv_dtype_for(*model, o.engine)));
    if (a.json) {
        std::cout << j.dump(2) << "\n";
    } else {
        print_long_context_bench(j);
        std::cout << "json: " << j.dump() << "\n";
    }
    return 0;
}

int run_bench(const BenchArgs& a) {
    if (!a.synthetic_context.empty()) return run_long_context_bench(a);
    if (a.gen_tokens < 8) throw std::runtime_error("--gen-tokens must be at least 8");
    const std::unique_ptr<Backend> device = make_backend(a.m.backend, a.m.backend_options());
    Backend& backend = *device;
    // The weights and one decode run's KV cache (a round holds three engines' at once).
    EngineOptions fit = a.m.engine_options();
    fit.context = static_cast<int64_t>(a.prompt_tokens) + a.gen_tokens;
    fit.max_seqs = a.batch;
    require_fits(a.m.model, backend, fit);
    const auto model = Model::load(a.m.model, backend, {}, a.m.numerics);
    const ModelConfig& c = model->config();
    if (a.shared_prefix > 0) {
        if (a.m.no_prefix_cache) throw std::runtime_error("--shared-prefix measures with and without the prefix cache; "
                                                        "--no-prefix-cache does not apply");
        PrefixBenchOptions po;
        po.system_tokens = a.shared_prefix;
        po.turn_tokens = a.prompt_tokens;
        po.turns = a.turns;
        po.kv_dtype = a.m.engine_options().kv_dtype;
        nlohmann::json j = bench_prefix_cache(*model, backend, po);
        j["model"] = a.m.model;
        j["backend"] = backend.name();
        if (a.json) {
            std::cout << j.dump(2) << "\n";
        } else {
            print_prefix_bench(j);
            std::cout << "json: " << j.dump() << "\n";
        }
        return j["tokens_match"].get<bool>() ? 0 : 2;
    }
    // --batch sequences of their own random prompts (no shared prefix), decoded together.
    std::vector<std::vector<int32_t>> prompts;
    for (int b = 0; b < a.batch; ++b) prompts.push_back(random_prompt(a.prompt_tokens, c.vocab_size, 12345 + b));
    const std::vector<int32_t>& prompt = prompts[0];

    // The bandwidth decode is held against: a multi-threaded read sweep on the CPU, device-to-device copies
    // (bytes read plus written) on a GPU.
    auto* cpu_backend = dynamic_cast<cpu::CpuBackend*>(&backend);
    // llama.cpp on the same file, when it can run here (once per round, like the other measurements).
    std::string llama_skipped;
    if (!std::filesystem::is_regular_file(a.m.model)) {
        llama_skipped = "not a GGUF file";
    } else if (cpu_backend == nullptr) {
        llama_skipped = "the comparison runs on the CPU backend only";
    } else if (a.batch != 1) {
        llama_skipped = "the comparison decodes one sequence";
    }
    std::string bw_kind = "cpu read sweep";
    const auto measure_bandwidth = [&]() -> double {
#ifdef TRACELM_HAVE_CUDA
        if (auto* gpu = dynamic_cast<cuda::CudaBackend*>(&backend)) {
            bw_kind = "device copy (" + gpu->device_name() + ")";
            return gpu->measure_copy_bandwidth(size_t{1} << 30);
        }
#endif
        return cpu_backend != nullptr ? measure_read_bandwidth(*cpu_backend) : 0.0;
    };
    // Bytes one decode step reads: every weight once plus K and V of each sequence's average context.
    const double avg_ctx = a.prompt_tokens + a.gen_tokens / 2.0;
    const EngineOptions engine_opt = a.m.engine_options();
    const DType kv_dtype = kv_dtype_for(*model, engine_opt);
    const double kv_bytes = 2.0 * c.num_hidden_layers *
                            static_cast<double>(dtype_row_bytes(kv_dtype, c.num_key_value_heads * c.head_dim)) * avg_ctx;
    const double bytes_per_step = static_cast<double>(model->decode_weight_bytes()) + kv_bytes * a.batch;

    // Rounds of paired eager / replayed decode and a bandwidth measurement, back to back: on a shared machine
    // speed drifts over seconds, so each ratio is taken within a round and the medians are reported.
    struct Round {
        DecodeRun eager, replay, sampled;
        double bw = 0.0;
        LlamaCppRun llama;
    };
    std::vector<Round> rounds;
    for (int r = 0; r < a.rounds; ++r) {
        Round rd;
        DecodeRuns runs = run_decode_runs(*model, backend, prompts, engine_opt, a.gen_tokens);
        rd.eager = std::move(runs.eager);
        rd.replay = std::move(runs.replay);
        rd.sampled = std::move(runs.sampled);
        rd.bw = measure_bandwidth();
        if (llama_skipped.empty()) {
            rd.llama = run_llamacpp(a.llamacpp_python, a.m.model, cpu_backend->threads(), prompt, a.gen_tokens,
                                    kReplayWarmSteps);
            llama_skipped = rd.llama.skipped;
        }
        rounds.push_back(std::move(rd));
    }
    const auto median = [&](auto&& f) {
        std::vector<double> v;
        for (const Round& rd : rounds) v.push_back(f(rd));
        std::sort(v.begin(), v.end());
        return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2.0;
    };
    bool tokens_match = true;
    nlohmann::json per_round = nlohmann::json::array();
    for (const Round& rd : rounds) {
        tokens_match = tokens_match && rd.eager.tokens == rd.replay.tokens && rd.eager.tokens == rounds[0].eager.tokens;
        per_round.push_back({{"decode_eager_tokens_per_s", rd.eager.decode_tok_s},
                             {"decode_replay_tokens_per_s", rd.replay.decode_tok_s},
                             {"decode_replay_sampled_tokens_per_s", rd.sampled.decode_tok_s},
                             {"read_bandwidth_gb_s", rd.bw / 1e9},
                             {"decode_bandwidth_share", bytes_per_step * rd.replay.decode_tok_s / a.batch / rd.bw}});
        if (llama_skipped.empty()) {
            per_round.back()["llamacpp_decode_tokens_per_s"] = rd.llama.decode_tok_s;
            per_round.back()["replay_over_llamacpp_decode"] = rd.replay.decode_tok_s / rd.llama.decode_tok_s;
        }
    }
    if (!llama_skipped.empty()) {
        (a.json ? std::cerr : std::cout) << "llama.cpp comparison: skipped (" << llama_skipped << ")\n";
    }
    const DecodeRun& replay = rounds[0].replay;
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);

    nlohmann::json j;
    j["model"] = a.m.model;
    j["backend"] = backend.name();
    if (cpu_backend != nullptr) {
        j["isa"] = cpu::isa_name(cpu::active_isa());
        j["threads"] = cpu_backend->threads();
    }
    j["weight_dtype"] = std::string(dtype_name(model->weight_dtype()));
    j["kv_dtype"] = std::string(dtype_name(kv_dtype));
    j["prefix_cache"] = !a.m.no_prefix_cache;  // each round's engines are fresh: nothing to share (see --shared-prefix)
    j["prompt_tokens"] = a.prompt_tokens;
    j["gen_tokens"] = a.gen_tokens;
    j["rounds"] = a.rounds;
    j["prefill_tokens_per_s"] = median([](const Round& rd) { return rd.eager.prefill_tok_s; });
    j["decode_eager_tokens_per_s"] = median([](const Round& rd) { return rd.eager.decode_tok_s; });
    j["decode_replay_tokens_per_s"] = median([](const Round& rd) { return rd.replay.decode_tok_s; });
    j["replay_over_eager"] = median([](const Round& rd) { return rd.replay.decode_tok_s / rd.eager.decode_tok_s; });
    // Sampled: temperature 0.8, top_k 40, top_p 0.95; the ratio is taken within each round.
    j["decode_replay_sampled_tokens_per_s"] = median([](const Round& rd) { return rd.sampled.decode_tok_s; });
    j["sampled_over_greedy_replay"] =
        median([](const Round& rd) { return rd.sampled.decode_tok_s / rd.replay.decode_tok_s; });
    j["graph_ops"] = replay.graph_ops;
    j["replay_step_us"] = median([](const Round& rd) { return rd.replay.step_us; });
    j["replay_host_us_per_step"] = median([](const Round& rd) { return rd.replay.host_us_per_step; });
    j["replay_host_share"] = median([](const Round& rd) { return rd.replay.host_us_per_step / rd.replay.step_us; });
    j["eager_host_us_per_step"] = median([](const Round& rd) { return rd.eager.host_us_per_step; });
    j["tokens_match"] = tokens_match;
    j["bandwidth_kind"] = bw_kind;
    j["read_bandwidth_gb_s"] = median([](const Round& rd) { return rd.bw; }) / 1e9;
    j["batch"] = a.batch;
    j["decode_bytes_per_step"] = bytes_per_step;
    j["decode_bandwidth_share"] =
        median([&](const Round& rd) { return bytes_per_step * rd.replay.decode_tok_s / a.batch / rd.bw; });
    j["per_round"] = per_round;
    j["peak_rss_mib"] = static_cast<double>(ru.ru_maxrss) / 1024.0;
    if (llama_skipped.empty()) {
        const LlamaCppRun& llama = rounds[0].llama;
        j["llamacpp_version"] = llama.version;
        j["llamacpp_prefill_tokens_per_s"] = median([](const Round& rd) { return rd.llama.prefill_tok_s; });
        j["llamacpp_decode_tokens_per_s"] = median([](const Round& rd) { return rd.llama.decode_tok_s; });
        j["replay_over_llamacpp_decode"] =
            median([](const Round& rd) { return rd.replay.decode_tok_s / rd.llama.decode_tok_s; });
        // How many leading greedy tokens the two engines share (they round differently, so near-ties may part them).
        size_t same = 0;
        while (same < llama.tokens.size() && same < replay.tokens.size() && llama.tokens[same] == replay.tokens[same])
            ++same;
        j["llamacpp_same_leading_tokens"] = same;
    } else {
        j["llamacpp_skipped"] = llama_skipped;
    }
    if (a.json) {
        std::cout << j.dump(2) << "\n";
    } else {
        std::printf("%-34s %14s\n", "metric", "value");
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (it.value().is_array()) continue;  // per_round: its own table below
            std::printf("%-34s %14s\n", it.key().c_str(), it.value().is_string() ? it.value().get<std::string>().c_str()
                                                                                : it.value().dump().c_str());
        }
        std::printf("\n%-6s %14s %14s %14s %14s %14s %16s\n", "round", "eager tok/s", "replay tok/s",
                    "sampled tok/s", "bandwidth GB/s", "decode share", "llama.cpp tok/s");
        for (size_t r = 0; r < per_round.size(); ++r) {
            const auto& pr = per_round[r];
            std::printf("%-6zu %14.2f %14.2f %14.2f %14.2f %14.3f %16s\n", r + 1,
                        pr["decode_eager_tokens_per_s"].get<double>(), pr["decode_replay_tokens_per_s"].get<double>(),
                        pr["decode_replay_sampled_tokens_per_s"].get<double>(), pr["read_bandwidth_gb_s"].get<double>(),
                        pr["decode_bandwidth_share"].get<double>(),
                        pr.contains("llamacpp_decode_tokens_per_s")
                            ? std::to_string(pr["llamacpp_decode_tokens_per_s"].get<double>()).c_str()
                            : "-");
        }
        std::cout << "json: " << j.dump() << "\n";
    }
    return tokens_match ? 0 : 2;
}
}  // namespace

Action add_bench(CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    add_model_flags(app, a->m, {.default_model = false, .context = false});
    app.add_option("--prompt-tokens", a->prompt_tokens, "prompt length")->check(CLI::Range(1, 1 << 16));
    app.add_option("--gen-tokens", a->gen_tokens, "tokens to generate")->check(CLI::Range(8, 1 << 16));
    app.add_option("--batch", a->batch, "sequences decoded together, each with its own prompt (tok/s counts all)")
        ->check(CLI::Range(1, 64));
    app.add_flag("--json", a->json, "print JSON only");
    app.add_option("--rounds", a->rounds, "rounds of eager decode, replayed decode and bandwidth (medians reported)")
        ->check(CLI::Range(1, 100));
    app.add_option("--shared-prefix", a->shared_prefix,
                   "prefix-cache mode: time to first token of --turns requests of a shared N-token system prompt and "
                   "--prompt-tokens of their own, with and without the prefix cache")
        ->check(CLI::Range(1, 1 << 16));
    app.add_option("--synthetic-context", a->synthetic_context,
                   "long-context mode: decode one sequence at each of these contexts (comma-separated), filled with "
                   "seeded random cache values instead of a prefill; --gen-tokens replayed steps each; with "
                   "DeepSeek's indexer also with dense attention; on the CPU, where an eager step's time goes")
        ->delimiter(',')
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    app.add_option("--turns", a->turns, "requests timed in --shared-prefix mode")->check(CLI::Range(1, 1000));
    app.add_option("--llamacpp-python", a->llamacpp_python,
                   "python with llama_cpp, to run llama.cpp on the same GGUF file for comparison (default: python3)");
    return [a] { return run_bench(*a); };
}

}  // namespace tracelm::cli
