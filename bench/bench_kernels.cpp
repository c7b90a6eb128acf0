// Microbenchmarks of the CPU kernels: CMake builds them as build/bench_kernels where Google Benchmark is
// installed. For example:
//   build/bench_kernels --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
// Shared or virtual machines vary a lot from run to run; interleaved repetitions compare like with like.
//
// Decode-sized weights are laid out as many copies, far larger than the last-level cache, and each
// iteration streams all of them once, like a decode step streams every layer; `threads` std::threads
// split the rows of each matrix.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/paged_attention.h"
#include "formats/repack.h"
#include "ops/sampling/sampling.h"

namespace {

using tracelm::DType;
using tracelm::cpu::Isa;
using tracelm::cpu::KernelTable;

constexpr int64_t kK = 1024, kN = 3072;
constexpr size_t kCopies = 80;  // 480 MiB: well beyond L3, like a model's weights
constexpr size_t kStreamBytes = kCopies * kN * kK * 2;

struct Aligned {
    void* p;
    explicit Aligned(size_t bytes) : p(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)) {
        std::memset(p, 0, bytes);  // also faults every page in before timing
    }
    ~Aligned() { std::free(p); }
    Aligned(const Aligned&) = delete;
    Aligned& operator=(const Aligned&) = delete;
};

// `copies` bf16 [kN, kK] matrices of small random values, back to back; built once per count.
const Aligned& weights(size_t copies) {
    static std::map<size_t, std::unique_ptr<Aligned>> cache;
    std::unique_ptr<Aligned>& slot = cache[copies];
    if (!slot) {
        const size_t n = copies * kN * kK;
        slot = std::make_unique<Aligned>(n * 2);
        auto* h = static_cast<uint16_t*>(slot->p);
        std::mt19937 rng(1);
        std::uniform_real_distribution<float> u(-0.05f, 0.05f);
        for (size_t i = 0; i < n; ++i) h[i] = tracelm::f32_to_bf16(u(rng));
    }
    return *slot;
}

const KernelTable* table_or_skip(benchmark::State& state) {
    const auto isa = static_cast<Isa>(state.range(0));
    if (!tracelm::cpu::can_run(isa)) {
        state.SkipWithError("ISA not supported by this CPU");
        return nullptr;
    }
    state.SetLabel(tracelm::cpu::isa_name(isa));
    return &tracelm::cpu::kernels_for(isa);
}

// Runs f(i) for i in [0, threads) on that many threads (the caller's thread takes i = 0).
template <class F>
void parallel(int threads, F&& f) {
    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i) pool.emplace_back(f, i);
    f(0);
    for (auto& t : pool) t.join();
}

// Args: isa, threads.
void BM_ReadSweep(benchmark::State& state) {
    const KernelTable* kt = table_or_skip(state);
    if (kt == nullptr) return;
    const int threads = static_cast<int>(state.range(1));
    const Aligned& buf = weights(kCopies);
    const size_t per = kStreamBytes / threads;
    for (auto _ : state) {
        std::vector<double> sums(static_cast<size_t>(threads));
        parallel(threads, [&](int i) { sums[i] = kt->read_sweep(static_cast<char*>(buf.p) + i * per, per); });
        benchmark::DoNotOptimize(sums.data());
    }
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(kStreamBytes) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Args: isa, threads, T, weight dtype. Every iteration multiplies T tokens by every
// [3072, 1024] matrix of the weight bytes: the bf16 copies, read as f16 (their values are then finite and
// normal) or as half as many f32 matrices (each f32 value a bf16 one plus low mantissa bits).
void BM_MatmulStream(benchmark::State& state) {
    const KernelTable* kt = table_or_skip(state);
    if (kt == nullptr) return;
    const int threads = static_cast<int>(state.range(1));
    const int64_t T = state.range(2);
    const auto dt = static_cast<DType>(state.range(3));
    const size_t matrix_bytes = static_cast<size_t>(kN * kK) * tracelm::dtype_size(dt);
    const size_t copies = kStreamBytes / matrix_bytes;
    const Aligned& w = weights(kCopies);
    std::vector<float> x(static_cast<size_t>(T * kK), 0.01f), y(static_cast<size_t>(T * kN));
    for (auto _ : state) {
        parallel(threads, [&](int i) {
            const int64_t n0 = kN * i / threads, n1 = kN * (i + 1) / threads;
            for (size_t c = 0; c < copies; ++c)
                kt->matmul(x.data(), T, kK, static_cast<const char*>(w.p) + c * matrix_bytes, dt, nullptr, y.data(),
                           kN, n0, n1);
        });
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(kStreamBytes) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Args: isa, threads, T. One cache-resident [3072, 1024] bf16 matrix (prefill-sized T).
void BM_MatmulCompute(benchmark::State& state) {
    const KernelTable* kt = table_or_skip(state);
    if (kt == nullptr) return;
    const int threads = static_cast<int>(state.range(1));
    const int64_t T = state.range(2);
    const Aligned& w = weights(1);
    std::vector<float> x(static_cast<size_t>(T * kK)), y(static_cast<size_t>(T * kN));
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x) v = u(rng);
    for (auto _ : state) {
        parallel(threads, [&](int i) {
            kt->matmul(x.data(), T, kK, w.p, DType::BF16, nullptr, y.data(), kN, kN * i / threads,
                       kN * (i + 1) / threads);
        });
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(T * kK * kN) * state.iterations() / 1e9,
                                                   benchmark::Counter::kIsRate);
}

// `copies` [kN, kK] matrices of type dt: random block bytes with a fixed f16 scale (and min) of 1/64, so every
// value is finite (a repacked type: those of its GGML type, repacked); built once per (type, count).
const Aligned& quant_weights(DType dt, size_t copies) {
    static std::map<std::pair<int, size_t>, std::unique_ptr<Aligned>> cache;
    std::unique_ptr<Aligned>& slot = cache[{static_cast<int>(dt), copies}];
    if (!slot && tracelm::dtype_is_repacked(dt)) {
        const Aligned& ggml = quant_weights(tracelm::dtype_unpacked(dt), copies);
        slot = std::make_unique<Aligned>(copies * kN * tracelm::dtype_row_bytes(dt, kK));
        for (size_t c = 0; c < copies; ++c) {
            const size_t matrix = kN * tracelm::dtype_row_bytes(dt, kK);
            tracelm::repack_r16(tracelm::dtype_unpacked(dt), static_cast<const char*>(ggml.p) + c * matrix,
                                static_cast<char*>(slot->p) + c * matrix, kN, kK);
        }
    }
    if (!slot) {
        const size_t row = tracelm::dtype_row_bytes(dt, kK), block = tracelm::dtype_block_bytes(dt);
        const size_t bytes = copies * kN * row;
        slot = std::make_unique<Aligned>(bytes);
        auto* p = static_cast<unsigned char*>(slot->p);
        std::mt19937 rng(3);
        for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(rng());
        const size_t d_at = dt == DType::Q6_K ? 208 : 0;  // Q6_K keeps its scale last
        const bool has_min = dt == DType::Q4_1 || dt == DType::Q5_1 || dt == DType::Q4_K || dt == DType::Q5_K;
        for (size_t b = 0; b < bytes; b += block) {
            p[b + d_at] = 0x00;
            p[b + d_at + 1] = 0x24;  // f16 0x2400 = 1/64
            if (has_min) {
                p[b + 2] = 0x00;
                p[b + 3] = 0x24;
            }
        }
    }
    return *slot;
}

// Random activations, outputs and one activation scratch per thread for a quantized matmul benchmark.
struct QuantIo {
    std::vector<float> x, y;
    std::vector<std::vector<unsigned char>> act;
    QuantIo(const KernelTable& kt, benchmark::State& state, int threads, int64_t T, DType dt)
        : x(static_cast<size_t>(T * kK)), y(static_cast<size_t>(T * kN)) {
        std::mt19937 rng(2);
        std::normal_distribution<float> nd;
        for (float& v : x) v = nd(rng);
        act.assign(static_cast<size_t>(threads),
                   std::vector<unsigned char>(tracelm::cpu::matmul_quant_act_bytes(dt, T, kK)));
        state.SetLabel(std::string(tracelm::cpu::isa_name(kt.isa)) + " " + std::string(tracelm::dtype_name(dt)));
    }
};

// Args: isa, threads, T, dtype. Every iteration multiplies T tokens by all copies of a quantized [3072, 1024]
// matrix (as many copies as make about 480 MiB of bf16, so the stream is far beyond the last-level cache);
// GB/s counts the quantized bytes read.
void BM_QuantMatmulStream(benchmark::State& state) {
    const KernelTable* kt = table_or_skip(state);
    if (kt == nullptr) return;
    const int threads = static_cast<int>(state.range(1));
    const int64_t T = state.range(2);
    const auto dt = static_cast<DType>(state.range(3));
    const size_t row = tracelm::dtype_row_bytes(dt, kK), matrix = kN * row;
    const size_t copies = kStreamBytes / matrix;
    const Aligned& w = quant_weights(dt, copies);
    QuantIo io(*kt, state, threads, T, dt);
    auto& [x, y, act] = io;
    for (auto _ : state) {
        parallel(threads, [&](int i) {
            const int64_t n0 = kN * i / threads, n1 = kN * (i + 1) / threads;
            for (size_t c = 0; c < copies; ++c)
                kt->quant->matmul(x.data(), T, kK, static_cast<const char*>(w.p) + c * matrix, dt, nullptr, y.data(),
                                  kN, n0, n1, act[static_cast<size_t>(i)].data(), tracelm::cpu::QuantOrder::VecDot);
        });
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GB/s"] = benchmark::Counter(static_cast<double>(copies * matrix) * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}

// Args: isa, threads, T, dtype. One cache-resident quantized [3072, 1024] matrix (T: a batched decode step of 16
// sequences, or a prefill).
void BM_QuantMatmulCompute(benchmark::State& state) {
    const KernelTable* kt = table_or_skip(state);
    if (kt == nullptr) return;
    const int threads = static_cast<int>(state.range(1));
    const int64_t T = state.range(2);
    const auto dt = static_cast<DType>(state.range(3));
    const Aligned& w = quant_weights(dt, 1);
    QuantIo io(*kt, state, threads, T, dt);
    auto& [x, y, act] = io;
    for (auto _ : state) {
        parallel(threads, [&](int i) {
            kt->quant->matmul(x.data(), T, kK, w.p, dt, nullptr, y.data(), kN, kN * i / threads,
                              kN * (i + 1) / threads, act[static_cast<size_t>(i)].data(),
                              tracelm::cpu::QuantOrder::VecDot);
        });
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GOP/s"] = benchmark::Counter(2.0 * static_cast<double>(T * kK * kN) * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

// The machine's peak integer throughput per thread, beside which QuantMatmulCompute's GOP/s are read: a
// register-only loop of the instructions that form int32 sums of u8 x s8 byte products, 8 independent
// accumulators deep. AVX2: vpmaddubsw + vpmaddwd + vpaddd per 32 products; AVX-VNNI: one vpdpbusd per 32;
// AVX512_VNNI: one per 64.
// The empty asm makes an operand opaque each iteration, so nothing is hoisted out of the loop.
constexpr int kPeakAccs = 8;
__attribute__((target("avx2"))) int64_t peak_products_avx2(int64_t iters) {
    __m256i acc[kPeakAccs], a[kPeakAccs];
    const __m256i b = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    for (int i = 0; i < kPeakAccs; ++i) {
        acc[i] = _mm256_setzero_si256();
        a[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
    }
    __m256i bv = b;
    for (int64_t n = 0; n < iters; ++n) {
        asm volatile("" : "+x"(bv));
        for (int i = 0; i < kPeakAccs; ++i)
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a[i], bv), ones));
    }
    for (int i = 1; i < kPeakAccs; ++i) acc[0] = _mm256_add_epi32(acc[0], acc[i]);
    benchmark::DoNotOptimize(acc[0]);
    return iters * kPeakAccs * 32;
}
__attribute__((target("avx512f,avx512vnni"))) int64_t peak_products_vnni(int64_t iters) {
    __m512i acc[kPeakAccs], a[kPeakAccs];
    const __m512i b = _mm512_set1_epi8(3);
    for (int i = 0; i < kPeakAccs; ++i) {
        acc[i] = _mm512_setzero_si512();
        a[i] = _mm512_set1_epi8(static_cast<char>(i + 1));
    }
    __m512i bv = b;
    for (int64_t n = 0; n < iters; ++n) {
        asm volatile("" : "+v"(bv));
        for (int i = 0; i < kPeakAccs; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a[i], bv);
    }
    for (int i = 1; i < kPeakAccs; ++i) acc[0] = _mm512_add_epi32(acc[0], acc[i]);
    benchmark::DoNotOptimize(acc[0]);
    return iters * kPeakAccs * 64;
}

__attribute__((target("avx2,avxvnni"))) int64_t peak_products_avx_vnni(int64_t iters) {
    __m256i acc[kPeakAccs], a[kPeakAccs];
    const __m256i b = _mm256_set1_epi8(3);
    for (int i = 0; i < kPeakAccs; ++i) {
        acc[i] = _mm256_setzero_si256();
        a[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
    }
    __m256i bv = b;
    for (int64_t n = 0; n < iters; ++n) {
        asm volatile("" : "+x"(bv));
        for (int i = 0; i < kPeakAccs; ++i) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a[i], bv);
    }
    for (int i = 1; i < kPeakAccs; ++i) acc[0] = _mm256_add_epi32(acc[0], acc[i]);
    benchmark::DoNotOptimize(acc[0]);
    return iters * kPeakAccs * 32;
}

// Args: isa (1: AVX2, 2: AVX-VNNI, 3: AVX512_VNNI), threads.
void BM_PeakInt8(benchmark::State& state) {
    const KernelTable* kt = table_or_skip(state);
    if (kt == nullptr) return;
    const bool vnni512 = kt->isa == Isa::Avx512, vnni256 = kt->isa == Isa::AvxVnni;
    if (vnni512 && !tracelm::cpu::cpu_features().avx512_vnni) {
        state.SkipWithError("no AVX512_VNNI");
        return;
    }
    const int threads = static_cast<int>(state.range(1));
    constexpr int64_t kIters = 1 << 20;
    int64_t products = 0;
    for (auto _ : state) {
        std::vector<int64_t> n(static_cast<size_t>(threads));
        parallel(threads, [&](int i) {
            n[i] = vnni512   ? peak_products_vnni(kIters)
                   : vnni256 ? peak_products_avx_vnni(kIters)
                             : peak_products_avx2(kIters);
        });
        for (int64_t v : n) products += v;
    }
    state.SetLabel(vnni512 ? "avx512_vnni vpdpbusd" : vnni256 ? "avx_vnni vpdpbusd" : "avx2 maddubs+madd+add");
    state.counters["GOP/s"] = benchmark::Counter(2.0 * static_cast<double>(products) / 1e9, benchmark::Counter::kIsRate);
}

// The isa argument is the Isa's value (0 portable, 1 avx2, 2 avxvnni, 3 avx512). AvxVnni differs from Avx2 in the
// quantized products only, so the float kernels' benchmarks skip it.
constexpr int kFloatIsas[] = {0, 1, 3};
constexpr int kQuantIsas[] = {0, 1, 2, 3};

void isa_threads(benchmark::internal::Benchmark* b) {
    for (int isa : kFloatIsas)
        for (int threads : {1, 2}) b->Args({isa, threads});
}

void isa_threads_tokens(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> tokens) {
    for (int isa : kFloatIsas)
        for (int threads : {1, 2})
            for (int64_t T : tokens) b->Args({isa, threads, T});
}

// Args: kv (0: f32 cache, 1: f16), geometry (0: SmolLM2-135M, 9 heads / 3 KV heads / head_dim 64; 1: qwen3-0.6b,
// 16 / 8 / 128), context. One decode token's attention on one thread in each of kLayers layers, whose caches
// together far exceed the last-level cache, as a decode step finds them after streaming the weights.
void BM_DecodeAttention(benchmark::State& state) {
    namespace cpu = tracelm::cpu;
    const bool f16 = state.range(0) == 1;
    const int heads = state.range(1) == 0 ? 9 : 16, kv_heads = state.range(1) == 0 ? 3 : 8;
    const int hd = state.range(1) == 0 ? 64 : 128;
    const auto ctx = static_cast<int32_t>(state.range(2));
    constexpr int kLayers = 96, kBlock = 16;
    const size_t esize = f16 ? 2 : 4, row = static_cast<size_t>(kv_heads * hd) * esize;
    const Aligned caches(2 * kLayers * static_cast<size_t>(ctx) * row);
    std::vector<int32_t> table(static_cast<size_t>((ctx + kBlock - 1) / kBlock));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    std::vector<float> q(static_cast<size_t>(heads * hd), 0.01f), out(q.size());
    const int32_t query_start[2] = {0, 1};
    const int64_t floats = cpu::f16_attention_workspace_floats(ctx, hd);
    std::vector<float> ws(static_cast<size_t>(floats));
    for (auto _ : state) {
        for (int l = 0; l < kLayers; ++l) {
            const auto* k = static_cast<const char*>(caches.p) + 2 * static_cast<size_t>(l) * ctx * row;
            const cpu::PagedAttentionArgs a{q.data(), k, k + ctx * row, table.data(), &ctx, query_start, out.data(),
                                            ctx, 1, static_cast<int>(table.size()), kBlock, heads, kv_heads, hd, 0.125f};
            if (f16)
                cpu::paged_attention_f16_range(
                    {a, cpu::active_kernels().f16_attention, ws.data(), floats, false, true}, 0, heads, {});
            else
                cpu::paged_attention_range(a, 0, heads);
        }
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["s/layer"] = benchmark::Counter(static_cast<double>(state.iterations()) * kLayers,
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Args: geometry (as BM_DecodeAttention), prompt tokens. One whole prompt's causal attention over an f16 cache on
// one thread, in tiles (the prefill path): every query row of the prompt against the rows before it, one layer.
void BM_PrefillAttention(benchmark::State& state) {
    namespace cpu = tracelm::cpu;
    const int heads = state.range(0) == 0 ? 9 : 16, kv_heads = state.range(0) == 0 ? 3 : 8;
    const int hd = state.range(0) == 0 ? 64 : 128;
    const auto len = static_cast<int32_t>(state.range(1));
    constexpr int kBlock = 16;
    const size_t row = static_cast<size_t>(kv_heads * hd) * 2;
    std::vector<uint16_t> caches(2 * static_cast<size_t>(len) * row / 2);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (uint16_t& c : caches) c = tracelm::f32_to_f16(u(rng));
    std::vector<int32_t> table(static_cast<size_t>((len + kBlock - 1) / kBlock));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    std::vector<float> q(static_cast<size_t>(len) * heads * hd), out(q.size());
    for (float& v : q) v = u(rng);
    const int32_t query_start[2] = {0, len};
    const int64_t floats = cpu::f16_attention_workspace_floats(len, hd);
    std::vector<float> ws(static_cast<size_t>(floats));
    const char* k = reinterpret_cast<const char*>(caches.data());
    const cpu::PagedAttentionArgs a{q.data(), k, k + len * row, table.data(), &len, query_start, out.data(),
                                    len, 1, static_cast<int>(table.size()), kBlock, heads, kv_heads, hd, 0.125f};
    for (auto _ : state) {
        cpu::paged_attention_f16_range({a, cpu::active_kernels().f16_attention, ws.data(), floats, true, true}, 0,
                                       static_cast<int64_t>(len) * heads, {});
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * len,
                                                 benchmark::Counter::kIsRate);
}

// Args: op (0: argmax, 1: sample with greedy parameters), threads. The decode step's last op before
// advance_decode, replayed from a graph on a CpuBackend over one row of SmolLM2's 49152 logits: what a greedy
// request pays for going through `sample` instead of `argmax`.
void BM_TokenChoice(benchmark::State& state) {
    using namespace tracelm;
    const bool sample = state.range(0) == 1;
    constexpr int64_t kVocab = 49152;
    cpu::CpuBackend be(static_cast<int>(state.range(1)));
    std::vector<Buffer*> bufs;
    auto tensor = [&](DType dt, int64_t rows, int64_t cols, const char* name) {
        bufs.push_back(be.alloc(static_cast<size_t>(rows * cols) * 4, name));
        return whole(bufs.back(), dt, rows, cols);
    };
    const Tensor logits = tensor(DType::F32, 1, kVocab, "logits"), ids = tensor(DType::I32, 1, 1, "ids");
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> l(kVocab);
    for (float& v : l) v = d(rng);
    be.upload(logits, l.data());
    SamplingIo io;
    io.params = tensor(DType::I32, 1, sampling::kParamWords, "params");
    io.counts = tensor(DType::I32, 1, kVocab, "counts");
    io.step = tensor(DType::I32, 1, 1, "step");
    io.logprobs = tensor(DType::F32, 1, 1 + sampling::kMaxLogprobs, "logprobs");
    io.top_ids = tensor(DType::I32, 1, sampling::kMaxLogprobs, "top_ids");
    io.ws = sampling::make_workspace(be, 1, kVocab);
    bufs.push_back(io.ws.buffer);
    const sampling::RowParams greedy{};  // temperature 0, no penalties, no logprobs
    const std::vector<int32_t> zeros(kVocab, 0);
    const int32_t step = 0;
    be.upload(io.params, &greedy);
    be.upload(io.counts, zeros.data());
    be.upload(io.step, &step);
    be.begin_capture();
    if (sample)
        be.sample(logits, io, ids);
    else
        be.argmax(logits, ids);
    const GraphId g = be.end_capture();
    for (auto _ : state) be.replay(g);
    state.SetLabel(sample ? "sample (greedy)" : "argmax");
    be.destroy_graph(g);
    for (Buffer* b : bufs) be.free(b);
}

BENCHMARK(BM_ReadSweep)->Apply(isa_threads)->ArgNames({"isa", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatmulStream)
    ->Apply([](benchmark::internal::Benchmark* b) {
        const auto bf16 = static_cast<int64_t>(DType::BF16);
        for (int isa : kFloatIsas)
            for (int threads : {1, 2})
                for (int64_t T : {1, 4, 8, 16}) b->Args({isa, threads, T, bf16});
        // The decode matvec on the other float weight types.
        for (int isa : kFloatIsas)
            for (DType dt : {DType::F32, DType::F16}) b->Args({isa, 1, 1, static_cast<int64_t>(dt)});
    })
    ->ArgNames({"isa", "threads", "T", "dtype"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantMatmulStream)
    ->Apply([](benchmark::internal::Benchmark* b) {
        for (int isa : kQuantIsas)
            for (int threads : {1, 2})
                for (int64_t T : {1, 4, 16})
                    for (DType dt : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q4_K, DType::Q6_K,
                                     DType::Q8_0_R16, DType::Q4_0_R16, DType::Q4_1_R16, DType::Q5_0_R16,
                                     DType::Q4_K_R16, DType::Q6_K_R16})
                        b->Args({isa, threads, T, static_cast<int64_t>(dt)});
    })
    ->ArgNames({"isa", "threads", "T", "dtype"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatmulCompute)
    ->Apply([](benchmark::internal::Benchmark* b) {
        isa_threads_tokens(b, {128, 512});
    })
    ->ArgNames({"isa", "threads", "T"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PeakInt8)
    ->Apply([](benchmark::internal::Benchmark* b) {
        for (int isa : {1, 2, 3})
            for (int threads : {1, 2}) b->Args({isa, threads});
    })
    ->ArgNames({"isa", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantMatmulCompute)
    ->Apply([](benchmark::internal::Benchmark* b) {
        for (int isa : kQuantIsas)
            for (int threads : {1, 2})
                for (int64_t T : {16, 64, 256})
                    for (DType dt : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q4_K, DType::Q6_K,
                                     DType::Q8_0_R16, DType::Q4_0_R16, DType::Q4_1_R16, DType::Q5_0_R16,
                                     DType::Q4_K_R16, DType::Q6_K_R16})
                        b->Args({isa, threads, T, static_cast<int64_t>(dt)});
    })
    ->ArgNames({"isa", "threads", "T", "dtype"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{0, 1}, {0, 1}, {256, 2048}})
    ->ArgNames({"f16", "geometry", "context"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillAttention)
    ->ArgsProduct({{0, 1}, {256, 1024}})
    ->ArgNames({"geometry", "prompt"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenChoice)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->ArgNames({"op", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
