// CUDA kernels of the decode_state family: argmax (lowest index wins ties, NaN never wins) and advance_decode (launchers declared in cuda_ops.h).
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

struct Best {
    float v;
    int64_t i;
    bool found;
};

__device__ __forceinline__ Best better(const Best& a, const Best& b) {
    if (a.found != b.found) return a.found ? a : b;
    if (!a.found || a.v != b.v) return a.v > b.v ? a : b;
    return a.i < b.i ? a : b;
}

__device__ Best shfl_best(const Best& b, int o) {
    return {__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o),
            __shfl_xor_sync(0xffffffffu, static_cast<int>(b.found), o) != 0};
}

constexpr int kArgmaxThreads = 1024;

// One block per row. Each thread scans its strided share in index order (strictly greater keeps the lowest
// index; NaN never compares greater), then the block reduces, lower index winning ties.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* logits, int32_t* ids, int64_t cols) {
    __shared__ Best s_best[kArgmaxThreads / 32];
    const float* row = logits + static_cast<int64_t>(blockIdx.x) * cols;
    Best b{-kInf, 0, false};
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float v = row[i];
        if (!isnan(v) && (!b.found || v > b.v)) b = {v, i, true};
    }
    for (int o = 16; o > 0; o >>= 1) b = better(b, shfl_best(b, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) s_best[warp] = b;
    __syncthreads();
    if (warp == 0) {
        b = lane < static_cast<int>(blockDim.x >> 5) ? s_best[lane] : Best{-kInf, 0, false};
        for (int o = 16; o > 0; o >>= 1) b = better(b, shfl_best(b, o));
        // A row of NaN only gives index 0, as on the CPU.
        if (lane == 0) ids[blockIdx.x] = b.found ? static_cast<int32_t>(b.i) : 0;
    }
}

// The CPU backend's run_advance, one thread per sequence.
__global__ void advance_kernel(AdvanceParams a) {
    const int32_t step = *a.step;
    __syncthreads();  // every thread has read the step before thread 0 advances it
    for (int s = threadIdx.x; s < a.num_seqs; s += blockDim.x) {
        const int32_t id = a.sampled[s];
        if (step >= 0 && step < a.history_rows) a.history[static_cast<int64_t>(step) * a.num_seqs + s] = id;
        a.token_ids[s] = id;
        const int32_t pos = a.positions[s] + 1;
        a.positions[s] = pos;
        a.seq_lens[s] += 1;
        const int32_t blk = pos / a.block_size;
        const int32_t page = blk < a.max_blocks ? a.block_tables[static_cast<int64_t>(s) * a.max_blocks + blk] : -1;
        a.slots[s] = page < 0 ? -1 : page * a.block_size + pos % a.block_size;
    }
    if (threadIdx.x == 0) *a.step = step + 1;
}

__global__ void kv_slots_kernel(const int32_t* positions, const int32_t* block_tables, int32_t* slots, int64_t rows,
                                int max_blocks, int block_size) {
    for (int64_t s = threadIdx.x; s < rows; s += blockDim.x) {
        const int32_t pos = positions[s];
        const int32_t blk = pos < 0 ? -1 : pos / block_size;
        const int32_t page = blk >= 0 && blk < max_blocks ? block_tables[s * max_blocks + blk] : -1;
        slots[s] = page < 0 ? -1 : page * block_size + pos % block_size;
    }
}

}  // namespace

void kv_slots(const int32_t* positions, const int32_t* block_tables, int32_t* slots, int64_t rows, int max_blocks,
              int block_size, cudaStream_t stream) {
    if (rows == 0) return;
    kv_slots_kernel<<<1, static_cast<unsigned>(std::clamp<int64_t>(rows, 1, 1024)), 0, stream>>>(
        positions, block_tables, slots, rows, max_blocks, block_size);
    check_launch("kv_slots");
}

void argmax(const float* logits, int32_t* ids, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows == 0) return;
    argmax_kernel<<<static_cast<unsigned>(rows), kArgmaxThreads, 0, stream>>>(logits, ids, cols);
    check_launch("argmax");
}

void advance_decode(const AdvanceParams& p, cudaStream_t stream) {
    advance_kernel<<<1, static_cast<unsigned>(std::clamp(p.num_seqs, 1, 1024)), 0, stream>>>(p);
    check_launch("advance_decode");
}

}  // namespace tracelm::cuda::ops
