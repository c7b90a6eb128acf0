// CpuBackend::moe_route, moe_route_grouped and moe_ffn (semantics in ops/moe/moe.h). moe_ffn runs as recorded ops
// over one backend scratch buffer: a counting sort of the (row, slot) pairs by expert (so each active expert's
// weights are read once for all the rows that chose it) and the gather of their input rows (one op for a few rows,
// two otherwise), the gate and up products of every active expert with the activation (each thread a share of every
// expert's weight rows), the down products, and the weighted sum of each row's slots in slot order. Which experts
// are active is read from `ids` when the ops run, so a recorded decode step routes on the device like an eager one.
// matmul's kernels give each output element the same bits whatever rows share the product (kernels.h), so grouping
// changes no row's result beyond the order llama.cpp takes by an expert's rows (ops/moe/moe.h).
#include <algorithm>
#include <cmath>
#include <utility>

#include "backends/cpu/ops/op_support.h"
#include "ops/ggml_math.h"
#include "ops/moe/moe.h"

namespace tracelm::cpu {

namespace {

// ---- moe_route ----

struct RouteArgs {
    const float* x;
    const float* router;
    float* logits;
    float* probs;  // scratch [T, E]
    int32_t* ids;
    float* weights;
    int64_t E, H, k;
    bool normalize;
    GgmlDot order;
};

void run_route(const RouteArgs& a, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
        float* x = a.logits + r * a.E;
        matmul_f32_ggml(a.x + r * a.H, 1, a.H, a.router, x, a.E, 0, a.E, a.order);
        float* p = a.probs + r * a.E;
        int32_t* ids = a.ids + r * a.k;
        float* w = a.weights + r * a.k;
        float m = -INFINITY;
        for (int64_t i = 0; i < a.E; ++i) {
            p[i] = std::isnan(x[i]) ? -INFINITY : x[i];
            m = p[i] > m ? p[i] : m;
        }
        if (std::isfinite(m))
            ggml::soft_max_row(p, p, a.E);
        else
            std::fill(p, p + a.E, 0.0f);
        int64_t n = 0;
        for (int64_t i = 0; i < a.E; ++i) moe::keep_best(p[i], static_cast<int32_t>(i), w, ids, n, a.k);
        if (!a.normalize) continue;
        double total = 0.0;
        for (int64_t j = 0; j < a.k; ++j) total += static_cast<double>(w[j]);
        const float t = std::max(static_cast<float>(total), 0x1p-14f);  // ggml's CLAMP before the DIV
        for (int64_t j = 0; j < a.k; ++j) w[j] /= t;
    }
}

// ---- moe_route_grouped ----

struct GroupedRouteArgs {
    const float* x;
    const float* router;
    const float* bias;
    float* logits;
    float* best;      // scratch [T, topk_group + k]
    int32_t* groups;  // scratch [T, topk_group]
    int32_t* ids;
    float* weights;
    int64_t E, H, k, n_group, topk_group;
    bool normalize;
    float scaling;
};

void run_route_grouped(const GroupedRouteArgs& a, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
        float* l = a.logits + r * a.E;
        // A row alone, in vec_dot's order: its bits do not depend on the other rows (batch invariance).
        matmul_f32_ggml(a.x + r * a.H, 1, a.H, a.router, l, a.E, 0, a.E, GgmlDot::VecDot);
        moe::route_grouped_row({l, a.bias, a.E, a.k, a.n_group, a.topk_group, a.normalize, a.scaling,
                                a.best + r * (a.topk_group + a.k), a.groups + r * a.topk_group},
                               a.ids + r * a.k, a.weights + r * a.k);
    }
}

// ---- moe_ffn ----

struct FfnArgs {
    const float* x;
    const int32_t* ids;
    const float* weights;
    float* out;
    const char* gate;
    const char* up;
    const char* down;
    DType wt;
    Activation act;
    bool whole_forward;  // batch_rows > 1: the rows are one forward, each expert's product ordered by its own rows
    int64_t T, k, E, H, I, threads;
    int32_t* offsets;  // [E + 1]: where each expert's pairs start in the sorted order
    int32_t* sorted;   // [T * k]: the pairs (t * k + j) by expert, then by pair
    int32_t* place;    // [T * k]: each pair's position in the sorted order (-1: an id outside [0, E))
    float* xs;         // [T * k, H]: the sorted pairs' input rows
    float* g;          // [T * k, I]: gate products, then act(gate) * up
    float* u;          // [T * k, I]: up products
    float* eo;         // [T * k, H]: down products
    char* act_scratch;  // quantized weights: a slice of act_stride bytes per thread
    int64_t act_stride;
};

void run_group(const FfnArgs& a, int64_t, int64_t) {
    const int64_t P = a.T * a.k;
    std::fill(a.offsets, a.offsets + a.E + 1, 0);
    for (int64_t p = 0; p < P; ++p)
        if (a.ids[p] >= 0 && a.ids[p] < a.E) ++a.offsets[a.ids[p] + 1];
    for (int64_t e = 0; e < a.E; ++e) a.offsets[e + 1] += a.offsets[e];
    for (int64_t p = 0; p < P; ++p) a.place[p] = -1;
    // Stable: within an expert, pairs stay in row order.
    for (int64_t p = 0, e = 0; e < a.E; ++e)
        for (int64_t q = 0; q < P; ++q)
            if (a.ids[q] == e) {
                a.sorted[p] = static_cast<int32_t>(q);
                a.place[q] = static_cast<int32_t>(p++);
            }
}

void run_gather(const FfnArgs& a, int64_t b, int64_t e) {
    for (int64_t p = b; p < std::min(e, static_cast<int64_t>(a.offsets[a.E])); ++p)
        std::copy_n(a.x + a.sorted[p] / a.k * a.H, a.H, a.xs + p * a.H);
}

// Both on one thread: for a few rows (a decode step) one synchronisation less costs more than the copy.
void run_group_gather(const FfnArgs& a, int64_t, int64_t) {
    run_group(a, 0, 1);
    run_gather(a, 0, a.T * a.k);
}

// The thread's share [n0, n1) of N output columns: whole 16-row groups, a repacked type's unit.
std::pair<int64_t, int64_t> share(const FfnArgs& a, int64_t thread, int64_t N) {
    constexpr int64_t kGrain = 16;
    const int64_t units = (N + kGrain - 1) / kGrain;
    return {units * thread / a.threads * kGrain, std::min(N, units * (thread + 1) / a.threads * kGrain)};
}

// y[rows of expert e, [n0, n1)] = in[those rows] . w_e^T for every active expert, w_e the N x K matrix at `w`
// + e * N * row_bytes, [n0, n1) the thread's share.
void products(const FfnArgs& a, int64_t thread, const char* w, const float* in, float* y, int64_t N, int64_t K) {
    const auto [n0, n1] = share(a, thread, N);
    if (n0 >= n1) return;
    const size_t row_bytes = dtype_row_bytes(a.wt, K);
    for (int64_t e = 0; e < a.E; ++e) {
        const int64_t r0 = a.offsets[e], rows = a.offsets[e + 1] - r0;
        if (rows == 0) continue;
        const char* we = w + static_cast<size_t>(e * N) * row_bytes;
        if (dtype_is_quantized(a.wt))
            matmul_quant(in + r0 * K, rows, K, we, a.wt, nullptr, y + r0 * N, N, n0, n1,
                         a.act_scratch + thread * a.act_stride, ggml_quant_order(a.wt, a.whole_forward ? rows : 1));
        else
            matmul(in + r0 * K, rows, K, we, a.wt, nullptr, y + r0 * N, N, n0, n1);
    }
}

// The gate and up products of the thread's share of the columns, then the activation of those columns (elementwise,
// each element where its row puts it, so the same as the whole row's).
void run_gate_up(const FfnArgs& a, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
        products(a, i, a.gate, a.xs, a.g, a.I, a.H);
        products(a, i, a.up, a.xs, a.u, a.I, a.H);
        const auto [n0, n1] = share(a, i, a.I);
        for (int64_t p = 0; n0 < n1 && p < a.offsets[a.E]; ++p) {
            const int64_t i0 = p * a.I + n0, i1 = p * a.I + n1;
            if (a.act == Activation::Silu)
                silu_mul(a.g, a.u, a.g, a.I, i0, i1);
            else
                gelu_mul(a.g, a.u, a.g, a.act == Activation::GeluTanhF16, i0, i1);
        }
    }
}

void run_down(const FfnArgs& a, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) products(a, i, a.down, a.g, a.eo, a.H, a.I);
}

void run_combine(const FfnArgs& a, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
        float* o = a.out + t * a.H;
        bool first = true;
        for (int64_t j = 0; j < a.k; ++j) {
            const int32_t p = a.place[t * a.k + j];
            if (p < 0) continue;
            const float w = a.weights[t * a.k + j];
            const float* y = a.eo + static_cast<int64_t>(p) * a.H;
            if (first) {
                for (int64_t c = 0; c < a.H; ++c) o[c] = w * y[c];
            } else {
                for (int64_t c = 0; c < a.H; ++c) {
                    const float term = w * y[c];  // rounded before the add, as ggml's MUL then ADD
                    o[c] += term;
                }
            }
            first = false;
        }
        if (first) std::fill(o, o + a.H, 0.0f);
    }
}

constexpr const char* kMoeScratchName = "cpu:moe_scratch";
// moe_route's probabilities, moe_route_grouped's selection.
constexpr const char* kMoeRouteScratchName = "cpu:moe_route_scratch";
// Up to this many (row, slot) pairs the sort and the gather are one op.
constexpr int64_t kGatherAlone = 128;

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

void CpuBackend::do_moe_route(const Tensor& x, const Tensor& router, int64_t batch_rows, bool normalize,
                              const Tensor& logits, const Tensor& ids, const Tensor& weights) {
    const int64_t T = x.rows, E = router.rows, H = x.cols;
    Buffer* probs = scratch_buffer(kMoeRouteScratchName, static_cast<size_t>(T * E) * sizeof(float));
    const auto b = reinterpret_cast<uintptr_t>(probs->data);
    // llamafile's tinyBLAS takes ggml's f32 products of 2 or more rows where K is a multiple of 8.
    const GgmlDot order = batch_rows >= 2 && H % 8 == 0 ? GgmlDot::Tinyblas : GgmlDot::VecDot;
    submit(run_route,
           RouteArgs{x.ptr<float>(), router.ptr<float>(), logits.ptr<float>(), static_cast<float*>(probs->data),
                     ids.ptr<int32_t>(), weights.ptr<float>(), E, H, ids.cols, normalize, order},
           Footprint().read(x).read(router).write(logits).write(ByteRange{b, b + static_cast<size_t>(T * E) * 4})
               .write(ids).write(weights),
           T, 4);
}

void CpuBackend::do_moe_route_grouped(const Tensor& x, const Tensor& router, const Tensor& bias, int n_group,
                                      int topk_group, bool normalize, float scaling, const Tensor& logits,
                                      const Tensor& ids, const Tensor& weights) {
    const int64_t T = x.rows, k = ids.cols;
    const size_t floats = static_cast<size_t>(T * (topk_group + k)), ints = static_cast<size_t>(T * topk_group);
    Buffer* scratch = scratch_buffer(kMoeRouteScratchName, (floats + ints) * 4);
    const auto b = reinterpret_cast<uintptr_t>(scratch->data);
    auto* best = static_cast<float*>(scratch->data);
    submit(run_route_grouped,
           GroupedRouteArgs{x.ptr<float>(), router.ptr<float>(), bias.ptr<float>(), logits.ptr<float>(), best,
                            reinterpret_cast<int32_t*>(best + floats), ids.ptr<int32_t>(), weights.ptr<float>(),
                            router.rows, x.cols, k, n_group, topk_group, normalize, scaling},
           Footprint().read(x).read(router).read(bias).write(logits).write(ByteRange{b, b + (floats + ints) * 4})
               .write(ids).write(weights),
           T, 4);
}

void CpuBackend::do_moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, const MoeExperts& experts,
                            const Tensor& out, int64_t batch_rows) {
    const Tensor &gate = *experts.gate, &up = *experts.up, &down = *experts.down;
    const int64_t T = x.rows, k = ids.cols, E = experts.count, H = x.cols, I = gate.rows / E, P = T * k;
    checks::require(!dtype_is_repacked(gate.dtype) || (I % 16 == 0 && H % 16 == 0), "moe_ffn",
                    "repacked expert weights need widths that are multiples of 16");
    // Scratch: the sort's ints, then the float rows, then each thread's quantized activations.
    const size_t ints = align64(static_cast<size_t>(E + 1 + 2 * P) * sizeof(int32_t));
    const size_t rows = static_cast<size_t>(P * (2 * H + 2 * I)) * sizeof(float);
    // An expert's rows: at most P (a row may name an expert in several slots).
    const size_t act_stride =
        dtype_is_quantized(gate.dtype) ? align64(matmul_quant_act_bytes(gate.dtype, P, std::max(H, I))) : 0;
    Buffer* scratch = scratch_buffer(kMoeScratchName, ints + rows + act_stride * static_cast<size_t>(threads()));
    char* base = static_cast<char*>(scratch->data);
    auto* i32 = reinterpret_cast<int32_t*>(base);
    auto* f = reinterpret_cast<float*>(base + ints);
    FfnArgs a{x.ptr<float>(), ids.ptr<int32_t>(), weights.ptr<float>(), out.ptr<float>(),
              static_cast<const char*>(gate.raw()), static_cast<const char*>(up.raw()),
              static_cast<const char*>(down.raw()), gate.dtype, experts.act, batch_rows > 1,
              T, k, E, H, I, threads(), i32, i32 + E + 1, i32 + E + 1 + P, f, f + P * H, f + P * (H + I),
              f + P * (H + 2 * I), base + ints + rows, static_cast<int64_t>(act_stride)};
    const auto range = [&](const void* p, size_t bytes) {
        const auto b = reinterpret_cast<uintptr_t>(p);
        return ByteRange{b, b + bytes};
    };
    const ByteRange sort = range(base, ints), xs = range(a.xs, static_cast<size_t>(P * H) * 4),
                    gu = range(a.g, static_cast<size_t>(P * 2 * I) * 4), eo = range(a.eo, static_cast<size_t>(P * H) * 4),
                    act = range(a.act_scratch, act_stride * static_cast<size_t>(threads()));
    if (P <= kGatherAlone) {
        submit(run_group_gather, a, Footprint().read(ids).read(x).write(sort).write(xs), 1);
    } else {
        submit(run_group, a, Footprint().read(ids).write(sort), 1);
        submit(run_gather, a, Footprint().read(x).read(sort).write(xs), P, 4);
    }
    submit(run_gate_up, a, Footprint().read(sort).read(xs).read(gate).read(up).write(gu).write(act), threads());
    submit(run_down, a, Footprint().read(sort).read(gu).read(down).write(eo).write(act), threads());
    submit(run_combine, a, Footprint().read(sort).read(weights).read(eo).write(out), T, 4);
}

}  // namespace tracelm::cpu
