#include <algorithm>
#include <cstdint>

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
// Float-weight matmuls are split dynamically in chunks of whole grains holding about this many bytes of
// weights. Each chunk starts a fresh stream whose first rows nothing has prefetched: 128 KiB chunks made
// qwen3-0.6b bf16 decode about a tenth slower than 512 KiB ones, which still leave hundreds of chunks per
// step to balance two threads with.
constexpr int64_t kMatmulChunkBytes = int64_t{512} << 10;
int64_t matmul_row_chunk(int64_t K, DType wt) {
    const int64_t row_bytes = K * static_cast<int64_t>(dtype_size(wt));
    const int64_t grains = row_bytes > 0 ? kMatmulChunkBytes / (row_bytes * kMatmulRowGrain) : 1;
    return (grains > 1 ? grains : 1) * kMatmulRowGrain;
}

// Quantized weights: the items are the pool's threads (item i runs on thread i). Each quantizes all T
// activation rows into its own slice of the backend's scratch (act + i * act_stride) and computes its share
// of the weight rows, split as float matmuls are. Quantizing the few activation rows on every thread costs
// far less than a barrier between a shared quantization and the dot products would.
struct QuantMatmulArgs {
    const float* x;
    const void* w;
    const float* bias;
    float* y;
    char* act;
    int64_t T, K, N, act_stride, threads;
    DType wt;
    QuantOrder order;
};
void run_quant_matmul(const QuantMatmulArgs& a, int64_t b, int64_t e) {
    const int64_t units = (a.N + kMatmulRowGrain - 1) / kMatmulRowGrain;
    for (int64_t i = b; i < e; ++i) {
        const int64_t n0 = units * i / a.threads * kMatmulRowGrain;
        const int64_t n1 = std::min(a.N, units * (i + 1) / a.threads * kMatmulRowGrain);
        if (n0 < n1)
            matmul_quant(a.x, a.T, a.K, a.w, a.wt, a.bias, a.y, a.N, n0, n1, a.act + i * a.act_stride, a.order);
    }
}

// Prefill-sized products go to the threads by tokens instead: item i quantizes tokens [i * chunk, (i + 1) * chunk)
// into its own region of the scratch and multiplies them by every weight row. No thread quantizes another's
// tokens, and the threads claim items as they finish (a fixed split of the rows left one thread waiting at the
// barrier on a busy machine). Each item streams all the weights, from cache at these sizes. Every output depends
// on its own row and token only (and the order, which the whole product's batch_rows picks), so the bits are those of
// the split by rows.
// The arguments are QuantMatmulArgs', act_stride the bytes of one item's region (threads is not used).
constexpr int64_t kTokenChunk = 32;
void run_quant_matmul_tokens(const QuantMatmulArgs& a, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
        const int64_t t0 = i * kTokenChunk, n = std::min(kTokenChunk, a.T - t0);
        matmul_quant(a.x + t0 * a.K, n, a.K, a.w, a.wt, a.bias, a.y + t0 * a.N, a.N, 0, a.N, a.act + i * a.act_stride,
                     a.order);
    }
}
bool split_by_tokens(int64_t T, int threads) { return threads > 1 && T >= 2 * threads * kTokenChunk; }

}  // namespace

void CpuBackend::do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out, int64_t batch_rows) {
    const float* bias_ptr = bias ? bias->ptr<float>() : nullptr;
    const Footprint fp =
        bias ? Footprint().read(x).read(w).read(*bias).write(out) : Footprint().read(x).read(w).write(out);
    if (!dtype_is_quantized(w.dtype)) {
        submit(run_matmul,
               MatmulArgs{x.ptr<float>(), w.raw(), bias_ptr, out.ptr<float>(), x.rows, x.cols, w.rows, w.dtype}, fp,
               w.rows, kMatmulRowGrain, matmul_row_chunk(x.cols, w.dtype));
        return;
    }
    // llama.cpp's order for a product of batch_rows rows: every row of x, alone in a piece or a token chunk here,
    // sums as in that product.
    const QuantOrder order = ggml_quant_order(w.dtype, batch_rows);
    if (split_by_tokens(x.rows, threads())) {
        const int64_t items = (x.rows + kTokenChunk - 1) / kTokenChunk;
        const size_t stride = (matmul_quant_act_bytes(w.dtype, kTokenChunk, x.cols) + 63) / 64 * 64;
        Buffer* scratch = scratch_buffer(kQuantScratchName, stride * static_cast<size_t>(items));
        // Any thread may run any item, so the scratch is written as a whole: a barrier parts this matmul from
        // any other that shares the scratch.
        const auto begin = reinterpret_cast<uintptr_t>(scratch->data);
        Footprint tfp = fp;
        submit(run_quant_matmul_tokens,
               QuantMatmulArgs{x.ptr<float>(), w.raw(), bias_ptr, out.ptr<float>(), static_cast<char*>(scratch->data),
                               x.rows, x.cols, w.rows, static_cast<int64_t>(stride), threads(), w.dtype, order},
               tfp.write(ByteRange{begin, begin + scratch->bytes}), items, 1, 1);
        return;
    }
    const size_t need = (matmul_quant_act_bytes(w.dtype, x.rows, x.cols) + 63) / 64 * 64;
    Buffer* scratch = scratch_buffer(kQuantScratchName, need * static_cast<size_t>(threads()));
    const size_t stride = scratch_slice_bytes(*scratch, threads());
    // Item i runs on thread i and uses slice i only, so two such matmuls sharing a phase never touch each other's
    // slices from different threads: the scratch is listed as read, which parts them only from a split by tokens.
    const auto begin = reinterpret_cast<uintptr_t>(scratch->data);
    Footprint rfp = fp;
    submit(run_quant_matmul,
           QuantMatmulArgs{x.ptr<float>(), w.raw(), bias_ptr, out.ptr<float>(), static_cast<char*>(scratch->data),
                           x.rows, x.cols, w.rows, static_cast<int64_t>(stride), threads(), w.dtype, order},
           rfp.read(ByteRange{begin, begin + scratch->bytes}), threads());
}

void CpuBackend::do_matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows) {
    // Separate recorded ops: they read the same input and write disjoint outputs, so barrier elision
    // already runs them in one phase.
    for (const MatmulOut& o : outs) matmul(x, *o.w, o.bias, o.out, batch_rows);
}

void CpuBackend::do_glu_matmul(const Tensor& gate, const Tensor& up, Activation act, const Tensor& w,
                               const Tensor& out, int64_t batch_rows) {
    // Two recorded ops: a matvec thread needs the whole activation vector, so the product is formed first
    // (in gate, which the interface lets us consume) behind one barrier.
    glu(gate, up, act, gate);
    matmul(gate, w, nullptr, out, batch_rows);
}

}  // namespace tracelm::cpu
