// CUDA kernels of the dsa family: the DSA indexer score (dsa_topk has its own file, dsa_topk.cu) (launchers declared in cuda_ops.h).
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

__global__ void dsa_indexer_kernel(const float* q, const float* weights, const float* keys, float* scores,
                                   int64_t items, int64_t num_keys, int64_t heads, int64_t dim) {
    for (int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; item < items;
         item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = item / num_keys;
        const float* k = keys + item % num_keys * dim;
        float score = 0.0f;
        for (int64_t h = 0; h < heads; ++h) {
            const float* qh = q + (t * heads + h) * dim;
            float dot = 0.0f;
            for (int64_t d = 0; d < dim; ++d) dot += qh[d] * k[d];
            if (dot > 0.0f) score += weights[t * heads + h] * dot;
        }
        scores[item] = score;
    }
}

}  // namespace

void dsa_indexer(const float* q, const float* weights, const float* keys, float* scores, int64_t rows,
                 int64_t num_keys, int64_t heads, int64_t dim, cudaStream_t stream) {
    const int64_t items = rows * num_keys;
    if (items == 0) return;
    dsa_indexer_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(q, weights, keys, scores, items, num_keys, heads,
                                                                     dim);
    check_launch("dsa_indexer");
}

}  // namespace tracelm::cuda::ops
