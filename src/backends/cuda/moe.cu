// CUDA kernels of the moe family: DeepSeek's grouped routing, moe_route_grouped (launcher declared in cuda_ops.h).
#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_ops.h"
#include "ops/moe/moe.h"

namespace tracelm::cuda::ops {

namespace {

// One block per row: its threads take the experts' router products (each a serial sum in index order, so a row's
// logits do not depend on the other rows), then one thread selects (a few hundred experts: the selection is
// not worth a parallel sort). Dynamic shared memory: the selection's scratch, topk_group + k floats then
// topk_group ints.
__global__ void moe_route_grouped_kernel(GroupedRouteParams p) {
    extern __shared__ float scratch[];
    const int64_t r = blockIdx.x;
    const float* x = p.x + r * p.hidden;
    float* logits = p.logits + r * p.experts;
    for (int64_t e = threadIdx.x; e < p.experts; e += blockDim.x) {
        const float* w = p.router + e * p.hidden;
        float dot = 0.0f;
        for (int64_t i = 0; i < p.hidden; ++i) dot += x[i] * w[i];
        logits[e] = dot;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    moe::route_grouped_row({logits, p.bias, p.experts, p.k, p.n_group, p.topk_group, p.normalize, p.scaling, scratch,
                            reinterpret_cast<int32_t*>(scratch + p.topk_group + p.k)},
                           p.ids + r * p.k, p.weights + r * p.k);
}

}  // namespace

void moe_route_grouped(const GroupedRouteParams& p, cudaStream_t stream) {
    if (p.rows == 0) return;
    const size_t shared = static_cast<size_t>(2 * p.topk_group + p.k) * sizeof(float);
    moe_route_grouped_kernel<<<static_cast<unsigned>(p.rows), 256, shared, stream>>>(p);
    check_launch("moe_route_grouped");
}

}  // namespace tracelm::cuda::ops
