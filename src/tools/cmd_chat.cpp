// Interactive chat: one user line in, the assistant's reply streamed out, the conversation kept.
#include <cstdio>
#include <iostream>

#include "backends/registry.h"
#include "chat/chat_template.h"
#include "tools/backend_choice.h"
#include "tools/chat_session.h"
#include "tools/commands.h"
#include "tools/model_loading.h"
#include "tools/sampling_flags.h"
#include "tools/output.h"

namespace tracelm::tools {

namespace {
struct ChatArgs {
    std::string model;
    std::string system;
    int max_tokens = 512;
    int64_t context = 4096;
    int threads = 0;
    std::string backend = "cpu";
    Numerics numerics = Numerics::Ggml;
    std::string kv_type;
    sampling::SamplingOptions sampling;
    bool no_prefix_cache = false;
};

int run_chat(const ChatArgs& a) {
    sampling::validate(a.sampling);
    const uint64_t seed = sampling::resolve_seed(a.sampling);
    const sampling::RowParams params = sampling::row_params(a.sampling, seed);
    const std::unique_ptr<Backend> device = make_backend(a.backend, {a.threads});
    const LoadedModel lm = load_model(a.model, *device, a.numerics);
    const Tokenizer& tok = lm.tokenizer;
    if (tok.chat_template().empty())
        throw std::runtime_error("chat needs a model with a chat template, and this one has none (for plain text, use "
                                 "generate --prompt)");
    const ChatTemplate tmpl = ChatTemplate::detect(tok.chat_template());
    EngineOptions opt;
    opt.context = a.context;
    opt.kv_dtype = kv_dtype_option(a.kv_type);
    opt.prefix_cache = !a.no_prefix_cache;
    Engine engine(*lm.model, *device, opt);
    std::fprintf(stderr, "model: %s\n(type a message; an empty line or end of input quits)\n",
                 model_summary(*lm.model, engine).c_str());
    // Each reply draws from the same seed, so a conversation replays with --seed.
    if (params.temperature > 0.0f) std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(seed));

    ChatSession session(tok, tmpl, a.system);
    std::string line;
    for (;;) {
        std::fprintf(stderr, "> ");
        if (!std::getline(std::cin, line) || line.empty()) break;
        // The prompt is the whole conversation, its earlier turns as they were computed: the engine's prefix cache
        // shares their KV blocks, replies included, so only the new turn is prefilled (tools/chat_session.h).
        const ChatSession::Prompt prompt = session.user(line);
        if (prompt.reencoded)
            std::fprintf(stderr, "[the template rewrites earlier turns: the conversation is encoded afresh]\n");
        if (static_cast<int64_t>(prompt.ids.size()) >= engine.context())
            throw std::runtime_error("the conversation no longer fits the context of " +
                                     std::to_string(engine.context()) + " tokens");
        const int budget = static_cast<int>(std::min<int64_t>(a.max_tokens, engine.context() - prompt.ids.size()));
        const int64_t reused_before = engine.prefix_stats().hit_tokens;
        StreamDecoder stream(tok);
        const GenerationStats st = generate(engine, tok, *lm.model, prompt.ids, budget, [&](int32_t id) {
            if (!ends_generation(tok, *lm.model, id)) {
                std::cout << stream.push(id);
                check_stdout();
            }
        }, params, prompt.decoded);
        std::cout << stream.flush() << "\n";
        check_stdout();  // before the stats on stderr, also when stdout is a pipe
        std::fprintf(stderr, "[%zu prompt tokens, %lld of them from the prefix cache]\n", prompt.ids.size(),
                     static_cast<long long>(engine.prefix_stats().hit_tokens - reused_before));
        std::vector<int32_t> reply = st.tokens;
        if (!reply.empty() && ends_generation(tok, *lm.model, reply.back())) reply.pop_back();
        session.assistant(st.tokens, tok.decode(reply));
    }
    return 0;
}
}  // namespace

Action add_chat(CLI::App& app) {
    auto a = std::make_shared<ChatArgs>();
    app.add_option("--model", a->model, "Hugging Face model folder or GGUF file (default: SmolLM2-135M-Instruct)")
        ->check(CLI::ExistingPath);
    app.add_option("--system", a->system, "system message");
    app.add_option("--max-tokens", a->max_tokens, "most tokens per reply")->check(CLI::Range(1, 1 << 20));
    app.add_option("--context", a->context, "KV cache tokens")->check(CLI::Range(1, 1 << 24));
    app.add_option("--threads", a->threads, "worker threads (default: all cores)")->check(CLI::Range(1, 1024));
    add_backend_option(app, a->backend);
    add_numerics_option(app, a->numerics);
    add_kv_type_option(app, a->kv_type);
    add_sampling_flags(app, a->sampling);
    add_prefix_cache_option(app, a->no_prefix_cache);
    return [a] { return run_chat(*a); };
}

}  // namespace tracelm::tools
