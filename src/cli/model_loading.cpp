#include "cli/model_loading.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "checkpoint/model_cache.h"

namespace tracelm::cli {

namespace {

void progress_bar(size_t done, size_t total) {
    if (!isatty(STDERR_FILENO) || total == 0) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::fprintf(stderr, "\rloading weights [%s%s] %3zu%%", std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - filled), ' ').c_str(), 100 * done / total);
    if (done == total) std::fprintf(stderr, "\r%*s\r", kWidth + 26, "");
}

}  // namespace

void require_fits(const std::string& path, const Backend& backend, const EngineOptions& engine) {
    const std::optional<size_t> capacity = backend.memory_capacity();
    if (!capacity) return;
    const auto opened = Model::open(path);
    const size_t weights = opened->stored_weight_bytes(), kv = Engine::kv_bytes_for(*opened, engine);
    if (weights + kv <= *capacity) return;
    const auto mib = [](size_t b) {
        char s[32];
        std::snprintf(s, sizeof(s), "%.1f MiB", static_cast<double>(b) / (1 << 20));
        return std::string(s);
    };
    throw std::runtime_error(path + " needs " + mib(weights + kv) + " of device memory (weights " + mib(weights) +
                             ", KV cache " + mib(kv) + "), more than the " + mib(*capacity) + " backend '" +
                             backend.name() + "' has; a smaller --context or fewer sequences shrink the KV cache");
}

LoadedModel load_model(const std::string& path, Backend& backend, Numerics numerics, const EngineOptions& engine) {
    const std::string resolved =
        path.empty() ? ensure_default_model([](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); })
                     : path;
    require_fits(resolved, backend, engine);
    auto model = Model::load(resolved, backend, progress_bar, numerics);
    Tokenizer tok = model->gguf()
                        ? Tokenizer::from_gguf(*model->gguf())
                        : Tokenizer::from_file((std::filesystem::path(resolved) / "tokenizer.json").string());
    std::vector<int32_t> end_ids = end_of_generation_ids(tok, model->config());
    return {std::move(model), std::move(tok), std::move(end_ids)};
}

std::string weight_types(const Model& model) {
    std::string types;
    for (const auto& [dt, n] : model.dtype_counts())
        types += (types.empty() ? "" : ", ") + std::string(dtype_name(dt)) + " x" + std::to_string(n);
    return types;
}

std::string model_summary(const Model& model, const Engine& engine) {
    const ModelConfig& c = model.config();
    char params[32];
    std::snprintf(params, sizeof(params), "%.1fM", static_cast<double>(model.parameters()) / 1e6);
    const std::string types = weight_types(model);
    char kv[32];
    std::snprintf(kv, sizeof(kv), "%.1f MiB %s", static_cast<double>(engine.kv_bytes()) / (1 << 20),
                  std::string(dtype_name(engine.kv_dtype())).c_str());
    return std::string(arch_name(c.arch)) + ", " + params + " parameters (" + types + "), " +
           std::to_string(c.num_hidden_layers) + " layers, context " + std::to_string(c.max_position_embeddings) +
           " (using " + std::to_string(engine.context()) + "), KV cache " + kv;
}

GenerationStats generate(Engine& engine, const std::vector<int32_t>& end_ids, const std::vector<int32_t>& prompt,
                         int max_tokens, const std::function<void(int32_t)>& on_token,
                         const sampling::RowParams& params, const std::vector<TokenSpan>& decoded) {
    using clock = std::chrono::steady_clock;
    GenerationStats st;
    auto emit = [&](int32_t id) {
        st.tokens.push_back(id);
        if (params.logprobs >= 0) st.logprobs.push_back(engine.logprobs().at(0));
        on_token(id);
    };
    const auto t0 = clock::now();
    emit(engine.start({prompt}, max_tokens, {params}, {decoded}).at(0));
    st.prefill_s = std::chrono::duration<double>(clock::now() - t0).count();
    const auto t1 = clock::now();
    while (static_cast<int>(st.tokens.size()) < max_tokens && !ends_generation(end_ids, st.tokens.back())) {
        engine.step();
        emit(engine.sampled().at(0));  // a read between replays, outside the captured region
    }
    st.decode_s = std::chrono::duration<double>(clock::now() - t1).count();
    st.decode_steps = engine.decode_steps();
    engine.finish();
    return st;
}

}  // namespace tracelm::cli
