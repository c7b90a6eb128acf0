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
};
void run_quant_matmul(const QuantMatmulArgs& a, int64_t b, int64_t e) {
    const int64_t units = (a.N + kMatmulRowGrain - 1) / kMatmulRowGrain;
    for (int64_t i = b; i < e; ++i) {
        const int64_t n0 = units * i / a.threads * kMatmulRowGrain;
        const int64_t n1 = std::min(a.N, units * (i + 1) / a.threads * kMatmulRowGrain);
        if (n0 < n1) matmul_quant(a.x, a.T, a.K, a.w, a.wt, a.bias, a.y, a.N, n0, n1, a.act + i * a.act_stride);
    }
}

}  // namespace

void CpuBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
    checks::matmul(x, w, bias, out, capabilities());
    const float* bias_ptr = bias ? bias->ptr<float>() : nullptr;
    const Footprint fp =
        bias ? Footprint().read(x).read(w).read(*bias).write(out) : Footprint().read(x).read(w).write(out);
    if (!dtype_is_quantized(w.dtype)) {
        submit(run_matmul,
               MatmulArgs{x.ptr<float>(), w.raw(), bias_ptr, out.ptr<float>(), x.rows, x.cols, w.rows, w.dtype}, fp,
               w.rows, kMatmulRowGrain, matmul_row_chunk(x.cols, w.dtype));
        return;
    }
    const size_t need = (matmul_quant_act_bytes(w.dtype, x.rows, x.cols) + 63) / 64 * 64;
    Buffer* scratch = scratch_buffer(kQuantScratchName, need * static_cast<size_t>(threads()));
    const size_t stride = scratch_slice_bytes(*scratch, threads());
    // The scratch stays out of the footprint: item i runs on thread i and uses slice i only, so two
    // matmuls sharing a phase never touch each other's slices from different threads.
    submit(run_quant_matmul,
           QuantMatmulArgs{x.ptr<float>(), w.raw(), bias_ptr, out.ptr<float>(), static_cast<char*>(scratch->data),
                           x.rows, x.cols, w.rows, static_cast<int64_t>(stride), threads(), w.dtype},
           fp, threads());
}

void CpuBackend::matmuls(const Tensor& x, std::span<const MatmulOut> outs) {
    checks::matmuls(x, outs, capabilities());
    // Separate recorded ops: they read the same input and write disjoint outputs, so barrier elision
    // already runs them in one phase.
    for (const MatmulOut& o : outs) matmul(x, *o.w, o.bias, o.out);
}

void CpuBackend::silu_mul_matmul(const Tensor& gate, const Tensor& up, const Tensor& w, const Tensor& out) {
    // Two recorded ops: a matvec thread needs the whole activation vector, so the product is formed first
    // (in gate, which the interface lets us consume) behind one barrier.
    silu_mul(gate, up, gate);
    matmul(gate, w, nullptr, out);
}

}  // namespace tracelm::cpu
