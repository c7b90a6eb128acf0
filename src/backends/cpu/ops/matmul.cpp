#include <algorithm>
#include <cstdint>
#include <span>

#include "backends/cpu/ops/op_support.h"

namespace tracelm::cpu {

namespace {

struct MatmulArgs {
    const float* x;
    const void* w;
    const float* bias;
    float* y;
    int64_t T, K, N;
    DType wt;
};
void run_matmul(const MatmulArgs& a, int64_t b, int64_t e) { matmul(a.x, a.T, a.K, a.w, a.wt, a.bias, a.y, a.N, b, e); }

// Rows of a matmul go to threads in units of this many (float weights: the op's grain).
constexpr int64_t kMatmulRowGrain = 16;
// Float-weight matmuls are claimed dynamically in ranges of at least this many bytes of weights (whole grains;
// ThreadPool's guided claims). Each range starts a fresh stream whose first rows nothing has prefetched: 128 KiB
// chunks made qwen3-0.6b bf16 decode about a tenth slower than 512 KiB ones.
constexpr int64_t kMatmulChunkBytes = int64_t{512} << 10;
int64_t matmul_row_chunk(int64_t K, DType wt) {
    const int64_t row_bytes = K * static_cast<int64_t>(dtype_size(wt));
    const int64_t grains = row_bytes > 0 ? kMatmulChunkBytes / (row_bytes * kMatmulRowGrain) : 1;
    return (grains > 1 ? grains : 1) * kMatmulRowGrain;
}

// Quantized weights: every product first quantizes its input rows to int8 (QuantKernels), once per thread or token
// chunk, for every output that shares the input and weight type (q, k and v; gate and up).
constexpr int kMaxQuantOuts = 3;
struct QuantOut {
    const void* w;
    const float* bias;
    float* y;
    int64_t N;
};
struct QuantMatmulArgs {
    const float* x;
    char* act;
    int64_t T, K, act_stride;
    DType wt;
    QuantOrder order;
    int32_t outs;
    QuantOut out[kMaxQuantOuts];
};
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Decode-sized products: an item is kMatmulRowGrain weight rows of one output (outputs in order), and the threads
// claim ranges of items as they finish (long ones first, single items last: guided_claim), so that a thread the
// machine slows down does less of the product instead of holding up the barrier. Each thread quantizes all T input
// rows into its own slice of the backend's scratch before its first range (the few rows cost far less than a
// barrier between a shared quantization and the products would).
void run_quant_rows(const QuantMatmulArgs& a, int64_t b, int64_t e, OpWorker worker) {
    char* act = a.act + worker.index * a.act_stride;
    if (worker.first) quantize_activations(a.x, a.T, a.K, a.wt, act);
    // The range's rows of each output it reaches, in one product call per output.
    for (int64_t j = 0, first = 0; j < a.outs && b < e; ++j) {
        const QuantOut& o = a.out[j];
        const int64_t end = first + ceil_div(o.N, kMatmulRowGrain);
        if (b < end) {
            const int64_t stop = std::min(e, end);
            matmul_quantized(act, a.T, a.K, o.w, a.wt, o.bias, o.y, o.N, (b - first) * kMatmulRowGrain,
                             std::min(o.N, (stop - first) * kMatmulRowGrain), a.order);
            b = stop;
        }
        first = end;
    }
}

// Prefill-sized products go to the threads by tokens instead: item i quantizes tokens [i * chunk, (i + 1) * chunk)
// into its own region of the scratch and multiplies them by every weight row of every output. No thread quantizes
// another's tokens, and the threads claim items as they finish. Each item streams all the weights, from cache at
// these sizes. Every output depends on its own row and token only (and the order, which the whole product's
// batch_rows picks), so the bits are those of the split by rows.
constexpr int64_t kTokenChunk = 32;
void run_quant_tokens(const QuantMatmulArgs& a, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
        const int64_t t0 = i * kTokenChunk, n = std::min(kTokenChunk, a.T - t0);
        char* act = a.act + i * a.act_stride;
        quantize_activations(a.x + t0 * a.K, n, a.K, a.wt, act);
        for (int j = 0; j < a.outs; ++j) {
            const QuantOut& o = a.out[j];
            matmul_quantized(act, n, a.K, o.w, a.wt, o.bias, o.y + t0 * o.N, o.N, 0, o.N, a.order);
        }
    }
}
bool split_by_tokens(int64_t T, int threads) { return threads > 1 && T >= 2 * threads * kTokenChunk; }

}  // namespace

void CpuBackend::do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out, int64_t batch_rows) {
    if (dtype_is_quantized(w.dtype)) {
        const MatmulOut one{&w, bias, out};
        quant_matmuls(x, std::span(&one, 1), batch_rows);
        return;
    }
    const float* bias_ptr = bias ? bias->ptr<float>() : nullptr;
    const Footprint fp =
        bias ? Footprint().read(x).read(w).read(*bias).write(out) : Footprint().read(x).read(w).write(out);
    submit(run_matmul, MatmulArgs{x.ptr<float>(), w.raw(), bias_ptr, out.ptr<float>(), x.rows, x.cols, w.rows, w.dtype},
           fp, w.rows, kMatmulRowGrain, matmul_row_chunk(x.cols, w.dtype));
}

void CpuBackend::quant_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows) {
    const DType wt = outs[0].w->dtype;
    // llama.cpp's order for a product of batch_rows rows: every row of x, alone in a piece or a token chunk here,
    // sums as in that product.
    QuantMatmulArgs args{x.ptr<float>(), nullptr, x.rows, x.cols, 0, wt, ggml_quant_order(wt, batch_rows),
                         static_cast<int32_t>(outs.size()), {}};
    Footprint fp = Footprint().read(x);
    for (size_t j = 0; j < outs.size(); ++j) {
        const MatmulOut& o = outs[j];
        args.out[j] = QuantOut{o.w->raw(), o.bias ? o.bias->ptr<float>() : nullptr, o.out.ptr<float>(), o.w->rows};
        fp.read(*o.w).write(o.out);
        if (o.bias) fp.read(*o.bias);
    }
    if (split_by_tokens(x.rows, threads())) {
        const int64_t items = ceil_div(x.rows, kTokenChunk);
        const size_t stride = (matmul_quant_act_bytes(wt, kTokenChunk, x.cols) + 63) / 64 * 64;
        Buffer* scratch = scratch_buffer(kQuantScratchName, stride * static_cast<size_t>(items));
        args.act = static_cast<char*>(scratch->data);
        args.act_stride = static_cast<int64_t>(stride);
        // Any thread may run any item, so the scratch is written as a whole: a barrier parts this product from
        // any other that shares the scratch.
        const auto begin = reinterpret_cast<uintptr_t>(scratch->data);
        submit(run_quant_tokens, args, fp.write(ByteRange{begin, begin + scratch->bytes}), items, 1, 1);
        return;
    }
    const size_t need = (matmul_quant_act_bytes(wt, x.rows, x.cols) + 63) / 64 * 64;
    Buffer* scratch = scratch_buffer(kQuantScratchName, need * static_cast<size_t>(threads()));
    args.act = static_cast<char*>(scratch->data);
    args.act_stride = static_cast<int64_t>(scratch_slice_bytes(*scratch, threads()));
    int64_t items = 0;
    for (const MatmulOut& o : outs) items += ceil_div(o.w->rows, kMatmulRowGrain);
    // Thread i uses slice i only, so two such products sharing a phase never touch each other's slices from
    // different threads: the scratch is listed as read, which parts them only from a split by tokens.
    const auto begin = reinterpret_cast<uintptr_t>(scratch->data);
    submit(run_quant_rows, args, fp.read(ByteRange{begin, begin + scratch->bytes}), items, 1, 1);
}

void CpuBackend::do_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows) {
    // Quantized outputs of one weight type share one quantization of x, up to kMaxQuantOuts at a time; the rest
    // are separate recorded ops, which read the same input and write disjoint outputs, so barrier elision runs
    // them in one phase.
    for (size_t i = 0; i < outs.size();) {
        size_t n = 1;
        if (dtype_is_quantized(outs[i].w->dtype)) {
            while (i + n < outs.size() && n < kMaxQuantOuts && outs[i + n].w->dtype == outs[i].w->dtype) ++n;
            quant_matmuls(x, outs.subspan(i, n), batch_rows);
        } else {
            matmul(x, *outs[i].w, outs[i].bias, outs[i].out, batch_rows);
        }
        i += n;
    }
}

void CpuBackend::do_glu_matmul(const Tensor& gate, const Tensor& up, Activation act, const Tensor& w,
                               const Tensor& out, int64_t batch_rows) {
    // Two recorded ops: a matvec thread needs the whole activation vector, so the product is formed first
    // (in gate, which the interface lets us consume) behind one barrier.
    glu(gate, up, act, gate);
    matmul(gate, w, nullptr, out, batch_rows);
}

}  // namespace tracelm::cpu
