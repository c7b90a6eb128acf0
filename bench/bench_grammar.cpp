// What constrained decoding costs the host per row and step (grammar/grammar.h, docs/structured-output.md): the
// matcher's mask for the next token (fill_mask, the scheduler's comparison with the mask the row holds included)
// and taking the sampled token, on SmolLM2's vocabulary (49152) and Gemma 3's (262144), at three points of a JSON
// answer; and compiling a schema, first and cached. CMake builds it as build/bench_grammar where Google Benchmark is
// installed; the models come from the cache (`tracelm fetch-model smollm2`, `tracelm fetch-model gemma3-270m`):
//   build/bench_grammar --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "formats/gguf.h"
#include "grammar/grammar.h"
#include "ops/sampling/sampling.h"
#include "tokenizer/tokenizer.h"

namespace {

using tracelm::Tokenizer;
namespace grammar = tracelm::grammar;

const char* kSchema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150}, "email": {"type": "string"},
    "tags": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}, "maxItems": 3}},
    "required": ["name", "age", "email"]})";

// The answer's prefixes the matcher is advanced by: at the start, inside a free string, before an integer.
const char* kPrefixes[] = {"", R"({"name": "Ada Love)", R"({"name": "Ada", "age": )"};
const char* kPoints[] = {"start", "in_string", "at_integer"};

std::string model_path(int which) {
    const char* cache = std::getenv("TRACELM_CACHE");
    const std::string dir = cache ? std::string(cache) : std::string(std::getenv("HOME")) + "/.cache/tracelm";
    return dir + (which == 0 ? "/models/SmolLM2-135M-Instruct.Q4_1.gguf" : "/models/gemma-3-270m-q4_k_m.gguf");
}

struct Vocab {
    Tokenizer tok;
    int64_t vocab;
    std::unique_ptr<grammar::Compiler> compiler;
};

// The model's tokenizer and a compiler over its logits, once per model; null when the model is not cached.
Vocab* vocab(int which) {
    static std::map<int, std::unique_ptr<Vocab>> cache;
    auto& v = cache[which];
    if (!v && std::filesystem::exists(model_path(which))) {
        const tracelm::GgufFile f(model_path(which));
        Tokenizer tok = Tokenizer::from_gguf(f);
        const int64_t n = which == 0 ? 49152 : 262144;
        v = std::make_unique<Vocab>(Vocab{tok, n, std::make_unique<grammar::Compiler>(tok, n)});
    }
    return v.get();
}

void BM_FillMask(benchmark::State& state) {
    Vocab* v = vocab(static_cast<int>(state.range(0)));
    if (!v) return state.SkipWithError("model not in the cache");
    grammar::Matcher m(v->compiler->compile({grammar::Kind::JsonSchema, kSchema}));
    for (const int32_t id : v->tok.encode(kPrefixes[state.range(1)], false)) {
        if (!m.accept(id)) return state.SkipWithError("prefix refused");
    }
    std::vector<uint32_t> mask(static_cast<size_t>((v->vocab + 31) / 32)), held(mask.size());
    for (auto _ : state) {
        m.fill_mask(mask.data());
        benchmark::DoNotOptimize(mask == held);
        held.swap(mask);
    }
    state.SetLabel(std::string(state.range(0) == 0 ? "smollm2 V=49152 " : "gemma3 V=262144 ") +
                   kPoints[state.range(1)]);
}
BENCHMARK(BM_FillMask)->ArgsProduct({{0, 1}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);

void BM_CompileSchema(benchmark::State& state) {
    Vocab* v = vocab(static_cast<int>(state.range(0)));
    if (!v) return state.SkipWithError("model not in the cache");
    int n = 0;
    for (auto _ : state) {
        // A schema of its own each iteration (another bound on the name's length): a first compilation, not the
        // cache's answer.
        std::string schema = kSchema;
        schema.replace(schema.find("40"), 2, std::to_string(100 + n++));
        benchmark::DoNotOptimize(v->compiler->compile({grammar::Kind::JsonSchema, schema}));
    }
    state.SetLabel(state.range(0) == 0 ? "smollm2 V=49152" : "gemma3 V=262144");
}
BENCHMARK(BM_CompileSchema)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_CompileSchemaCached(benchmark::State& state) {
    Vocab* v = vocab(static_cast<int>(state.range(0)));
    if (!v) return state.SkipWithError("model not in the cache");
    v->compiler->compile({grammar::Kind::JsonSchema, kSchema});
    for (auto _ : state) benchmark::DoNotOptimize(v->compiler->compile({grammar::Kind::JsonSchema, kSchema}));
    state.SetLabel(state.range(0) == 0 ? "smollm2 V=49152" : "gemma3 V=262144");
}
BENCHMARK(BM_CompileSchemaCached)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The device side on the CPU backend (2 threads): adjust_logits over 16 rows, every row masked to the tokens of a
// JSON value's next step (about 1 in 40 allowed) and biased by 10 tokens.
void BM_AdjustLogits16Rows(benchmark::State& state) {
    const int64_t R = 16, V = state.range(0), W = tracelm::sampling::mask_words(V);
    const int64_t B = tracelm::sampling::kMaxLogitBias;
    tracelm::cpu::CpuBackend be(2);
    auto t = [&](tracelm::DType dt, int64_t cols, const char* name) {
        return tracelm::whole(be.alloc(static_cast<size_t>(R * cols) * 4, name), dt, R, cols);
    };
    const tracelm::Tensor logits = t(tracelm::DType::F32, V, "logits");
    const tracelm::LogitAdjustIo io{t(tracelm::DType::I32, 2, "flags"), t(tracelm::DType::I32, W, "mask"),
                                    t(tracelm::DType::I32, B, "bias_ids"), t(tracelm::DType::F32, B, "bias_values")};
    std::vector<int32_t> flags(static_cast<size_t>(2 * R), 1), ids(static_cast<size_t>(R * B), 7);
    for (int64_t r = 0; r < R; ++r) flags[static_cast<size_t>(2 * r + 1)] = 10;
    std::vector<uint32_t> mask(static_cast<size_t>(R * W));
    for (size_t w = 0; w < mask.size(); ++w) mask[w] = w % 5 == 0 ? 0x01010101u : 0u;
    be.upload(io.flags, flags.data());
    be.upload(io.mask, mask.data());
    be.upload(io.bias_ids, ids.data());
    be.upload(io.bias_values, std::vector<float>(ids.size(), 1.0f).data());
    const std::vector<float> x(static_cast<size_t>(R * V), 0.5f);
    for (auto _ : state) {
        state.PauseTiming();
        be.upload(logits, x.data());
        state.ResumeTiming();
        be.adjust_logits(logits, io);
    }
    state.SetLabel("16 rows, V=" + std::to_string(V));
}
BENCHMARK(BM_AdjustLogits16Rows)->Arg(49152)->Arg(262144)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
