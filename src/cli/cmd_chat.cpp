// Interactive chat: one user line in, the assistant's reply streamed out, the conversation kept.
#include <cstdio>
#include <iostream>

#include "backends/registry.h"
#include "chat/chat_template.h"
#include "cli/chat_template_flag.h"
#include "cli/model_flags.h"
#include "chat/chat_session.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "cli/sampling_flags.h"
#include "cli/output.h"
#include "runtime/untrusted.h"

namespace tracelm::cli {

namespace {
struct ChatArgs {
    ModelFlags m;
    std::string system;
    std::string chat_template;  // --chat-template FILE
    int max_tokens = 512;
    sampling::SamplingOptions sampling;
};

int run_chat(const ChatArgs& a) {
    sampling::validate(a.sampling);
    const uint64_t seed = sampling::resolve_seed(a.sampling);
    const sampling::RowParams params = sampling::row_params(a.sampling, seed);
    const std::string template_source = read_chat_template_flag(a.chat_template);
    const std::unique_ptr<Backend> device = make_backend(a.m.backend, a.m.backend_options());
    const LoadedModel lm = load_model(a.m.model, *device, a.m.numerics, a.m.engine_options());
    const Tokenizer& tok = lm.tokenizer;
    if (tok.chat_template().empty() && template_source.empty())
        throw std::runtime_error("chat needs a model with a chat template, and this one has none (give one with "
                                 "--chat-template FILE; for plain text, use generate --prompt)");
    const ChatTemplate tmpl = ChatTemplate::for_tokenizer(tok, template_source);
    Engine engine(*lm.model, *device, a.m.engine_options());
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
        // shares their KV blocks, replies included, so only the new turn is prefilled (chat/chat_session.h).
        ChatSession::Prompt prompt;
        try {
            prompt = session.user(line);
        } catch (const ChatTemplateError& e) {
            // The template refused the conversation (a Gemma template wants roles to alternate, ...): say so and let
            // the user go on; the conversation is as it was.
            std::fprintf(stderr, "[the chat template refused this message: %s]\n", untrusted::escape(e.what()).c_str());
            continue;
        }
        if (prompt.reencoded)
            std::fprintf(stderr, "[the template rewrites earlier turns: the conversation is encoded afresh]\n");
        if (static_cast<int64_t>(prompt.ids.size()) >= engine.context())
            throw std::runtime_error("the conversation no longer fits the context of " +
                                     std::to_string(engine.context()) + " tokens");
        const int budget = static_cast<int>(std::min<int64_t>(a.max_tokens, engine.context() - prompt.ids.size()));
        const int64_t reused_before = engine.prefix_stats().hit_tokens;
        StreamDecoder stream(tok);
        const GenerationStats st = generate(engine, lm.end_ids, prompt.ids, budget, [&](int32_t id) {
            if (!ends_generation(lm.end_ids, id)) {
                std::cout << stream.push(id);
                check_stdout();
            }
        }, params, prompt.decoded);
        std::cout << stream.flush() << "\n";
        check_stdout();  // before the stats on stderr, also when stdout is a pipe
        std::fprintf(stderr, "[%zu prompt tokens, %lld of them from the prefix cache]\n", prompt.ids.size(),
                     static_cast<long long>(engine.prefix_stats().hit_tokens - reused_before));
        std::vector<int32_t> reply = st.tokens;
        if (!reply.empty() && ends_generation(lm.end_ids, reply.back())) reply.pop_back();
        session.assistant(st.tokens, tok.decode(reply));
    }
    return 0;
}
}  // namespace

Action add_chat(CLI::App& app) {
    auto a = std::make_shared<ChatArgs>();
    add_model_flags(app, a->m);
    app.add_option("--system", a->system, "system message");
    add_chat_template_flag(app, a->chat_template);
    app.add_option("--max-tokens", a->max_tokens, "most tokens per reply")->check(CLI::Range(1, 1 << 20));
    add_sampling_flags(app, a->sampling);
    return [a] { return run_chat(*a); };
}

}  // namespace tracelm::cli
