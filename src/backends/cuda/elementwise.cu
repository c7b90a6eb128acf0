// CUDA kernels of the elementwise family: copy-free elementwise ops: embedding, add, glu, gather_last (launchers declared in cuda_ops.h).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_ops.h"

namespace tracelm::cuda::ops {

namespace {

template <DType D>
__global__ void embedding_kernel(const int32_t* ids, const void* table, int64_t vocab, int64_t dim, float scale,
                                 float* out) {
    const int64_t t = blockIdx.x;
    const int32_t id = ids[t];
    float* o = out + t * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
        o[c] = id < 0 || id >= vocab ? 0.0f : load_w<D>(table, id * dim + c) * scale;
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void glu_kernel(const float* gate, const float* up, Activation act, float* out, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        out[i] = activate(act, gate[i]) * up[i];
}

__global__ void gather_last_kernel(const float* x, const int32_t* query_start, float* out, int64_t rows, int64_t cols) {
    const int64_t s = blockIdx.x;
    const int64_t r = static_cast<int64_t>(query_start[s + 1]) - 1;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[s * cols + c] = r < 0 || r >= rows ? 0.0f : x[r * cols + c];
}

// A candidate of argmax: the best non-NaN value seen and its index (found == false: none yet).

}  // namespace

void embedding(const int32_t* ids, int64_t T, const void* table, DType dt, int64_t vocab, int64_t dim, float scale,
               float* out, cudaStream_t stream) {
    if (T == 0) return;
    with_weight_type(dt, [&](auto tag) {
        embedding_kernel<decltype(tag)::value>
            <<<static_cast<unsigned>(T), 256, 0, stream>>>(ids, table, vocab, dim, scale, out);
    });
    check_launch("embedding");
}

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(a, b, out, n);
    check_launch("add");
}

void glu(const float* gate, const float* up, Activation act, float* out, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    glu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(gate, up, act, out, n);
    check_launch("glu");
}

void gather_last(const float* x, const int32_t* query_start, float* out, int64_t rows, int64_t cols, int64_t seqs,
                 cudaStream_t stream) {
    if (seqs == 0) return;
    gather_last_kernel<<<static_cast<unsigned>(seqs), 256, 0, stream>>>(x, query_start, out, rows, cols);
    check_launch("gather_last");
}

}  // namespace tracelm::cuda::ops
