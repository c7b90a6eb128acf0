// CUDA dsa_topk: one block per row. The block finds the topk-th best order key by radix selection over
// 11, 11 and 10-bit digits, with the digit histogram in shared memory: the first pass histograms the whole
// window and gathers the keys of the chosen bin into the row's workspace, the next two histogram only those.
// It then emits the keys above that threshold and the first ties at it in ascending key order, tile by tile,
// placing each with a block-wide prefix sum. Nothing per thread is sized by topk or nk.
#include <cuda_runtime.h>

#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "backends/cuda/dsa_topk_cuda.h"

namespace tracelm::cuda {

namespace {

using Count = unsigned long long;

constexpr int kThreads = 512;
constexpr unsigned kBins = 1u << 11;  // the widest digit's histogram
static_assert(kThreads % 32 == 0 && (kBins / 2) % kThreads == 0, "every thread owns whole chunks of bins");

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

// Inclusive prefix sum of v over the block in thread order; `total` gets the block's sum. warp_sums holds
// blockDim.x / 32 entries. Every thread of the block must call it.
__device__ Count block_inclusive_scan(Count v, Count* warp_sums, Count& total) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (unsigned o = 1; o < 32; o <<= 1) {
        const Count n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
    }
    if (lane == 31) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        Count w = lane < warps ? warp_sums[lane] : 0;
        for (unsigned o = 1; o < 32; o <<= 1) {
            const Count n = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += n;
        }
        if (lane < warps) warp_sums[lane] = w;
    }
    __syncthreads();
    if (warp > 0) v += warp_sums[warp - 1];
    total = warp_sums[warps - 1];
    __syncthreads();  // warp_sums is reused by the next scan
    return v;
}

__device__ void clear(Count* hist, unsigned bins) {
    for (unsigned d = threadIdx.x; d < bins; d += blockDim.x) hist[d] = 0;
    __syncthreads();
}

// The digit (of hist's `bins`) holding the need-th best key still in play: the highest digit whose bins
// from the top hold at least `need` keys; `need` becomes that key's rank within the digit. Thread t sums the
// t-th chunk of bins from the top, so a block scan finds the chunk, and its thread the digit.
__device__ unsigned select_digit(const Count* hist, unsigned bins, Count& need, Count* warp_sums, unsigned& s_digit,
                                 Count& s_need) {
    const unsigned per = bins / blockDim.x;
    const unsigned top = bins - threadIdx.x * per;  // this thread's chunk is [top - per, top)
    Count sum = 0;
    for (unsigned d = top - per; d < top; ++d) sum += hist[d];
    Count total;
    const Count through = block_inclusive_scan(sum, warp_sums, total);
    Count above = through - sum;
    if (above < need && through >= need) {
        for (unsigned d = top; d-- > top - per;) {
            if (above + hist[d] >= need) {
                s_digit = d;
                s_need = need - above;
                break;
            }
            above += hist[d];
        }
    }
    __syncthreads();
    need = s_need;
    return s_digit;
}

struct KernelArgs {
    const float* scores;
    const int64_t* window_start;
    const int64_t* window_end;
    int64_t* indices;
    uint32_t* candidates;  // workspace: `keys` per row
    int64_t keys, topk;
    dsa::CausalRows causal;
};

__global__ void __launch_bounds__(kThreads) topk_kernel(KernelArgs a) {
    __shared__ Count hist[kBins];
    __shared__ unsigned s_digit;
    __shared__ Count s_need, s_count;
    extern __shared__ Count warp_sums[];  // blockDim.x / 32

    const int64_t r = blockIdx.x;
    const dsa::KeyWindow w = dsa::row_window(a.window_start, a.window_end, a.causal, r, a.keys);
    int64_t* out = a.indices + r * a.topk;
    if (w.size <= a.topk) {
        for (int64_t j = threadIdx.x; j < a.topk; j += blockDim.x) out[j] = j < w.size ? w.begin + j : -1;
        return;
    }
    const float* x = a.scores + r * a.keys + w.begin;
    const int64_t n = w.size;
    uint32_t* cand = a.candidates + r * a.keys;
    Count need = static_cast<Count>(a.topk);

    // Top 11 bits over the window; the keys in the chosen bin become the candidates (in any order).
    clear(hist, kBins);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&hist[dsa::order_key(x[i]) >> 21], Count{1});
    __syncthreads();
    const unsigned d1 = select_digit(hist, kBins, need, warp_sums, s_digit, s_need);
    if (threadIdx.x == 0) s_count = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const uint32_t k = dsa::order_key(x[i]);
        if ((k >> 21) == d1) cand[atomicAdd(&s_count, Count{1})] = k;
    }
    __syncthreads();
    const Count m = s_count;

    // Middle 11 bits over the candidates.
    clear(hist, kBins);
    for (Count j = threadIdx.x; j < m; j += blockDim.x) atomicAdd(&hist[(cand[j] >> 10) & (kBins - 1)], Count{1});
    __syncthreads();
    const unsigned d2 = select_digit(hist, kBins, need, warp_sums, s_digit, s_need);

    // Low 10 bits over the candidates that also have digit d2.
    clear(hist, kBins / 2);
    for (Count j = threadIdx.x; j < m; j += blockDim.x) {
        const uint32_t k = cand[j];
        if (((k >> 10) & (kBins - 1)) == d2) atomicAdd(&hist[k & (kBins / 2 - 1)], Count{1});
    }
    __syncthreads();
    const unsigned d3 = select_digit(hist, kBins / 2, need, warp_sums, s_digit, s_need);

    const uint32_t threshold = (d1 << 21) | (d2 << 10) | d3;
    const Count take_equal = need;
    const auto taken = [take_equal](Count equal) { return equal < take_equal ? equal : take_equal; };
    // Keys above the threshold and ties at it before this tile (the same in every thread).
    Count above_before = 0, equal_before = 0;
    for (int64_t tile = 0; tile < n; tile += blockDim.x) {
        const int64_t i = tile + threadIdx.x;
        const uint32_t k = i < n ? dsa::order_key(x[i]) : 0;
        const bool above = i < n && k > threshold;
        const bool equal = i < n && k == threshold;
        // Both counts in one scan: above in the low half, equal in the high half (a tile holds < 2^32 keys).
        const Count flags = (above ? Count{1} : 0) | (equal ? Count{1} << 32 : 0);
        Count total;
        const Count before = block_inclusive_scan(flags, warp_sums, total) - flags;
        const Count a_before = above_before + (before & 0xffffffffu);
        const Count e_before = equal_before + (before >> 32);
        if (above) {
            out[a_before + taken(e_before)] = w.begin + i;
        } else if (equal && e_before < take_equal) {
            out[a_before + e_before] = w.begin + i;
        }
        above_before += total & 0xffffffffu;
        equal_before += total >> 32;
        if (above_before + taken(equal_before) == static_cast<Count>(a.topk)) break;
    }
}

template <typename T>
struct DeviceArray {
    T* p = nullptr;
    explicit DeviceArray(size_t n) { check(cudaMalloc(&p, (n == 0 ? 1 : n) * sizeof(T)), "cudaMalloc"); }
    ~DeviceArray() { cudaFree(p); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
};

template <typename T>
void to_device(const DeviceArray<T>& dst, const std::vector<T>& src) {
    if (!src.empty()) {
        check(cudaMemcpy(dst.p, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), "copy to device");
    }
}

}  // namespace

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clears the sticky error for later calls
        return 0;
    }
    return n;
}

size_t dsa_topk_workspace_bytes(int64_t max_rows, int64_t max_keys) {
    return dsa::array_bytes(max_rows, max_keys, sizeof(uint32_t));
}

void dsa_topk(const DsaTopkDeviceArgs& a, void* stream) {
    dsa::check_topk_args(a.rows, a.keys, a.topk, a.rows, a.rows);
    if (a.rows > std::numeric_limits<int>::max()) {
        throw std::invalid_argument("dsa_topk: " + std::to_string(a.rows) +
                                    " rows exceed the CUDA grid (one block per row)");
    }
    if (a.workspace == nullptr || a.workspace_bytes < dsa_topk_workspace_bytes(a.rows, a.keys)) {
        throw std::invalid_argument("dsa_topk: the workspace needs " +
                                    std::to_string(dsa_topk_workspace_bytes(a.rows, a.keys)) + " bytes for " +
                                    std::to_string(a.rows) + " rows of " + std::to_string(a.keys) + " keys");
    }
    if (a.rows == 0) return;
    const KernelArgs k{a.scores, a.window_start, a.window_end, a.indices, static_cast<uint32_t*>(a.workspace),
                       a.keys, a.topk, a.causal};
    topk_kernel<<<static_cast<unsigned>(a.rows), kThreads, kThreads / 32 * sizeof(Count),
                  static_cast<cudaStream_t>(stream)>>>(k);
    check(cudaGetLastError(), "dsa_topk launch");
}

std::vector<int64_t> dsa_topk_host(const dsa::TopkCase& c, bool graph) {
    dsa::check_case(c);
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        throw std::runtime_error(std::string("no CUDA device: ") + cudaGetErrorString(e));
    }
    if (devices == 0) throw std::runtime_error("no CUDA device: none found");

    std::vector<int64_t> out(static_cast<size_t>(c.rows * c.topk));
    if (c.rows == 0) return out;
    const DeviceArray<float> scores(c.scores.size());
    const DeviceArray<int64_t> start(c.window_start.size()), end(c.window_end.size()), indices(out.size());
    const size_t ws_bytes = dsa_topk_workspace_bytes(c.rows, c.keys);
    const DeviceArray<unsigned char> ws(ws_bytes);
    to_device(scores, c.scores);
    to_device(start, c.window_start);
    to_device(end, c.window_end);

    cudaStream_t raw = nullptr;
    check(cudaStreamCreate(&raw), "stream create");
    const std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream(raw, cudaStreamDestroy);
    const DsaTopkDeviceArgs args{scores.p, start.p, end.p, indices.p, ws.p, ws_bytes, c.rows, c.keys, c.topk, {}};
    if (graph) {
        // The arguments were checked above, so the launch inside the capture does not throw before enqueueing.
        check(cudaStreamBeginCapture(raw, cudaStreamCaptureModeThreadLocal), "begin capture");
        dsa_topk(args, raw);
        cudaGraph_t g = nullptr;
        check(cudaStreamEndCapture(raw, &g), "end capture");
        const std::unique_ptr<CUgraph_st, decltype(&cudaGraphDestroy)> recorded(g, cudaGraphDestroy);
        cudaGraphExec_t x = nullptr;
        check(cudaGraphInstantiate(&x, g, 0), "graph instantiate");
        const std::unique_ptr<CUgraphExec_st, decltype(&cudaGraphExecDestroy)> exec(x, cudaGraphExecDestroy);
        check(cudaGraphLaunch(x, raw), "graph launch");
    } else {
        dsa_topk(args, raw);
    }
    check(cudaStreamSynchronize(raw), "dsa_topk");
    check(cudaMemcpy(out.data(), indices.p, out.size() * sizeof(int64_t), cudaMemcpyDeviceToHost), "copy to host");
    return out;
}

}  // namespace tracelm::cuda
