#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace tracelm::tools {

namespace {
struct GenerateArgs {
    std::string model;
    std::string prompt;
    int max_tokens = 128;
    std::string capture = "on";
    bool json = false;
    int64_t context = 4096;
    int threads = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_generate(const GenerateArgs& a) {
    const Tokenizer tok = Tokenizer::from_file((std::filesystem::path(a.model) / "tokenizer.json").string());
    cpu::CpuBackend backend(a.threads > 0 ? a.threads : cpu::ThreadPool::default_threads());
    const auto model = Model::load(a.model, backend);
    const std::vector<int32_t> prompt = tok.encode(a.prompt);
    if (prompt.empty()) throw std::runtime_error("the prompt encodes to no tokens");

    EngineOptions opt;
    opt.capture = a.capture == "on";
    opt.context = a.context;
    Engine engine(*model, backend, opt);
    const auto& eos = model->config().eos_token_ids;
    auto is_eos = [&](int32_t id) { return std::find(eos.begin(), eos.end(), id) != eos.end(); };

    StreamDecoder stream(tok);
    std::vector<int32_t> out;
    auto emit = [&](int32_t id) {
        out.push_back(id);
        if (!a.json && !is_eos(id)) {
            std::cout << stream.push(id) << std::flush;
        }
    };

    const auto t0 = std::chrono::steady_clock::now();
    emit(engine.start({prompt}, a.max_tokens).at(0));
    const double prefill_s = seconds_since(t0);

    const auto t1 = std::chrono::steady_clock::now();
    while (static_cast<int>(out.size()) < a.max_tokens && !is_eos(out.back())) {
        engine.step();
        emit(engine.sampled().at(0));  // a read between replays, outside the captured region
    }
    const double decode_s = seconds_since(t1);
    const int decode_steps = engine.decode_steps();
    engine.finish();

    std::vector<int32_t> text_ids = out;
    if (!text_ids.empty() && is_eos(text_ids.back())) text_ids.pop_back();
    if (a.json) {
        nlohmann::json j;
        j["prompt_tokens"] = prompt.size();
        j["tokens"] = out;
        j["text"] = tok.decode(text_ids);
        j["prefill_tokens_per_s"] = static_cast<double>(prompt.size()) / prefill_s;
        j["decode_tokens_per_s"] = decode_steps > 0 ? decode_steps / decode_s : 0.0;
        j["capture"] = engine.captured();
        j["replays"] = engine.replays();
        std::cout << j.dump() << "\n";
    } else {
        std::cout << stream.flush() << "\n";
        std::fprintf(stderr, "[%zu prompt tokens, %.1f tok/s prefill; %zu generated, %.2f tok/s decode, capture %s, %d replays]\n",
                     prompt.size(), static_cast<double>(prompt.size()) / prefill_s, out.size(),
                     decode_steps > 0 ? decode_steps / decode_s : 0.0, engine.captured() ? "on" : "off",
                     engine.replays());
    }
    return 0;
}
}  // namespace

Action add_generate(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    app.add_option("--model", a->model, "Hugging Face model folder")->required()->check(CLI::ExistingDirectory);
    app.add_option("--prompt", a->prompt, "prompt text")->required();
    app.add_option("--max-tokens", a->max_tokens, "tokens to generate")->check(CLI::Range(1, 1 << 20));
    app.add_option("--capture", a->capture, "replay decode from a captured graph")->check(CLI::IsMember({"on", "off"}));
    app.add_flag("--json", a->json, "print one JSON object instead of streaming text");
    app.add_option("--context", a->context, "KV cache tokens per sequence")->check(CLI::Range(1, 1 << 24));
    app.add_option("--threads", a->threads, "worker threads (default: all cores)")->check(CLI::Range(1, 1024));
    return [a] { return run_generate(*a); };
}

}  // namespace tracelm::tools
