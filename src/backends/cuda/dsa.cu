// CUDA kernels of the dsa family: the DSA indexer scores, over contiguous keys and paged (dsa_topk has its own file,
// dsa_topk.cu) (launchers declared in cuda_ops.h).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_ops.h"
#include "ops/dsa/dsa_indexer.h"

namespace tracelm::cuda::ops {

namespace {

// Row t's score of key k: heads summed in order (both indexers, so the paged one gives the same bits).
__device__ float indexer_score(const float* q, const float* weights, const float* k, int64_t t, int64_t heads,
                               int64_t dim) {
    float score = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
        const float* qh = q + (t * heads + h) * dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < dim; ++d) dot += qh[d] * k[d];
        if (dot > 0.0f) score += weights[t * heads + h] * dot;
    }
    return score;
}

__global__ void dsa_indexer_kernel(const float* q, const float* weights, const float* keys, float* scores,
                                   int64_t items, int64_t num_keys, int64_t heads, int64_t dim) {
    for (int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; item < items;
         item += static_cast<int64_t>(gridDim.x) * blockDim.x)
        scores[item] = indexer_score(q, weights, keys + item % num_keys * dim, item / num_keys, heads, dim);
}

// One thread per (row, position) of [T, max_keys]; positions past the row's window return at once, so a row
// costs its window (the grid, fixed for a captured step, covers max_keys).
__global__ void dsa_indexer_paged_kernel(PagedIndexerParams p) {
    const dsa::CausalRows rows{p.query_start, p.seq_lens, p.num_seqs};
    const int64_t items = p.rows * p.max_keys;
    for (int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; item < items;
         item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = item / p.max_keys, pos = item % p.max_keys;
        const dsa::CausalRow row = dsa::causal_row(rows, t);
        if (row.seq < 0 || pos >= row.end) continue;
        const int64_t slot = dsa::paged_key_slot(p.block_tables + row.seq * p.max_blocks, p.max_blocks, p.block_size,
                                                 p.num_slots, pos);
        p.scores[item] =
            slot < 0 ? -kInf : indexer_score(p.q, p.weights, p.key_cache + slot * p.dim, t, p.heads, p.dim);
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

void dsa_indexer_paged(const PagedIndexerParams& p, cudaStream_t stream) {
    const int64_t items = p.rows * p.max_keys;
    if (items == 0) return;
    dsa_indexer_paged_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(p);
    check_launch("dsa_indexer_paged");
}

}  // namespace tracelm::cuda::ops
