#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "backends/registry.h"
#include "chat/chat_template.h"
#include "cli/chat_template_flag.h"
#include "engine/engine.h"
#include "cli/model_flags.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "cli/sampling_flags.h"
#include "cli/output.h"
#include "runtime/untrusted.h"

namespace tracelm::cli {

namespace {
struct GenerateArgs {
    ModelFlags m;
    std::string prompt;
    int max_tokens = 128;
    std::string capture = "on";
    bool json = false;
    bool chat = false;
    std::string chat_template;  // --chat-template FILE
    sampling::SamplingOptions sampling;
};

int run_generate(const GenerateArgs& a) {
    sampling::validate(a.sampling);
    const uint64_t seed = sampling::resolve_seed(a.sampling);
    if (!a.chat_template.empty() && !a.chat) throw std::runtime_error("--chat-template needs --chat");
    const std::string template_source = read_chat_template_flag(a.chat_template);
    const std::unique_ptr<Backend> device = make_backend(a.m.backend, a.m.backend_options());
    Backend& backend = *device;
    EngineOptions opt = a.m.engine_options();
    opt.capture = a.capture == "on";
    const LoadedModel lm = load_model(a.m.model, backend, a.m.numerics, opt);
    const Tokenizer& tok = lm.tokenizer;
    if (a.chat && tok.chat_template().empty() && template_source.empty())
        throw std::runtime_error("the model has no chat template; use a plain prompt without --chat, or give one with "
                                 "--chat-template FILE");
    std::string text = a.prompt;
    if (a.chat) {
        ChatInput input;
        input.messages.push_back({{"role", "user"}, {"content", a.prompt}});
        try {
            text = ChatTemplate::for_tokenizer(tok, template_source).apply(input);
        } catch (const ChatTemplateError& e) {
            // The template's own message comes from the model file: escaped for the terminal.
            throw std::runtime_error("the chat template refused the prompt: " + untrusted::escape(e.what()));
        }
    }
    const std::vector<int32_t> prompt = encode_prompt(tok, text);
    if (prompt.empty()) throw std::runtime_error("the prompt encodes to no tokens");

    Engine engine(*lm.model, backend, opt);
    if (!a.json) std::fprintf(stderr, "model: %s\n", model_summary(*lm.model, engine).c_str());

    StreamDecoder stream(tok);
    const GenerationStats st = generate(engine, lm.end_ids, prompt, a.max_tokens, [&](int32_t id) {
        if (!a.json && !ends_generation(lm.end_ids, id)) {
            std::cout << stream.push(id);
            check_stdout();  // flushes; stops at once rather than generate for a reader that is gone
        }
    }, sampling::row_params(a.sampling, seed));

    std::vector<int32_t> text_ids = st.tokens;
    if (!text_ids.empty() && ends_generation(lm.end_ids, text_ids.back())) text_ids.pop_back();
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
        j["prefix_cache"] = {{"enabled", !a.m.no_prefix_cache},
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
    add_model_flags(app, a->m);
    app.add_option("--prompt", a->prompt, "prompt text")->required();
    app.add_flag("--chat", a->chat, "format the prompt as a user message with the model's chat template");
    add_chat_template_flag(app, a->chat_template);
    app.add_option("--max-tokens", a->max_tokens, "tokens to generate")->check(CLI::Range(1, 1 << 20));
    app.add_option("--capture", a->capture, "replay decode from a captured graph")->check(CLI::IsMember({"on", "off"}));
    app.add_flag("--json", a->json, "print one JSON object instead of streaming text");
    add_sampling_flags(app, a->sampling);
    return [a] { return run_generate(*a); };
}

}  // namespace tracelm::cli
