// CUDA sample and adjust_logits (semantics in ops/sampling/sampling.h): one block per row. Penalties, the maximum,
// argmax and the masses are block-parallel; the k best tokens are found by a radix selection of the k-th best order
// key (dsa_topk's order), 8 bits a pass with warp-aggregated shared histograms, emitted in id order from per-thread
// chunks placed by block prefix sums, and ranked by counting. Only the short candidate lists (top-p prefix, draw
// walk) are walked by one thread. Sums that define the draw are taken in a fixed order, so a replay draws what the
// eager call drew.
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/sampling_cuda.h"
#include "ops/dsa/dsa_topk.h"
#include "ops/sampling/sampling.h"

namespace tracelm::cuda {

namespace {

using sampling::RowParams;

constexpr int kThreads = 512;

constexpr int kWarps = kThreads / 32;
constexpr int kDigits = 256;  // best()'s radix: 8 bits a pass

struct Shared {
    double sums[kThreads];
    int hist[kDigits];
    uint32_t digit;
    int need;
    int64_t counts[kThreads];
    int scan[kThreads];
    float m;
    int64_t valid;
    int64_t argmax;
    int32_t id;
    int64_t n;
    double z;
};

// Exclusive prefix sum of v in thread order; `total` gets the block's sum.
__device__ int block_exclusive_scan(int v, int* sh, int& total) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int o = 1; o < kThreads; o <<= 1) {
        const int add = static_cast<int>(threadIdx.x) >= o ? sh[threadIdx.x - o] : 0;
        __syncthreads();
        sh[threadIdx.x] += add;
        __syncthreads();
    }
    const int incl = sh[threadIdx.x];
    total = sh[kThreads - 1];
    __syncthreads();
    return incl - v;
}

class Row {
   public:
    __device__ Row(const SampleDeviceArgs& a, int64_t r, Shared& sh)
        : a_(a), x_(a.logits + r * a.vocab), V_(a.vocab), sel_(a.workspace + r * 3 * a.vocab),
          cand_(sel_ + a.vocab), rank_(cand_ + a.vocab), sh_(sh) {}

    // sel_: the k best non-NaN tokens (k <= valid) in ascending id order; cand_: the same in rank order,
    // rank_[i]: the rank of sel_[i]. Returns their mass at temperature 1 summed in ascending id order.
    __device__ double best(int64_t k) {
        last_k_ = k;
        // The k-th best order key by radix selection, 8 bits a pass from the top: each pass histograms the next
        // digit of the keys whose higher digits are those chosen so far (4 passes, where one bit a pass took 32).
        uint32_t prefix = 0, mask = 0;
        int need = static_cast<int>(k);  // the wanted key's rank among the keys matching prefix
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < kDigits; i += kThreads) sh_.hist[i] = 0;
            __syncthreads();
            const int lane = threadIdx.x & 31;
            for (int64_t base = 0; base < V_; base += kThreads) {
                const int64_t v = base + threadIdx.x;
                const uint32_t key = v < V_ ? dsa::order_key(x_[v]) : 0u;
                const bool in = v < V_ && (key & mask) == prefix;
                const uint32_t digit = in ? (key >> shift) & (kDigits - 1) : kDigits;
                // Lanes of a warp with the same digit add once: logits crowd into a few bins, and conflicting
                // shared-memory atomics serialise.
                const unsigned same = __match_any_sync(0xffffffffu, digit);
                if (in && lane == __ffs(same) - 1) atomicAdd(&sh_.hist[digit], __popc(same));
            }
            __syncthreads();
            // Thread t holds the bin of digit 255 - t, so an inclusive scan counts the keys at or above each digit.
            const int count = threadIdx.x < kDigits ? sh_.hist[kDigits - 1 - threadIdx.x] : 0;
            int total = 0;
            const int above = block_exclusive_scan(count, sh_.scan, total);
            if (count > 0 && above < need && above + count >= need) {
                sh_.digit = kDigits - 1 - threadIdx.x;
                sh_.need = need - above;
            }
            __syncthreads();
            prefix |= sh_.digit << shift;
            mask |= static_cast<uint32_t>(kDigits - 1) << shift;
            need = sh_.need;
            __syncthreads();
        }
        // Emission in id order: thread t owns ids [b, e); it counts its keys above the threshold and its ties, the
        // block scans both, and each thread then writes its taken ids at the count of those taken before them.
        const int take_equal = need;
        const int64_t b = V_ * threadIdx.x / kThreads, e = V_ * (threadIdx.x + 1) / kThreads;
        int gt = 0, eq = 0;
        for (int64_t v = b; v < e; ++v) {
            const uint32_t key = dsa::order_key(x_[v]);
            gt += key > prefix;
            eq += key == prefix;
        }
        int unused = 0;
        int ties = block_exclusive_scan(eq, sh_.scan, unused);
        int64_t pos = block_exclusive_scan(gt, sh_.scan, unused) + (ties < take_equal ? ties : take_equal);
        for (int64_t v = b; v < e; ++v) {
            const uint32_t key = dsa::order_key(x_[v]);
            if (key > prefix || (key == prefix && ties++ < take_equal)) sel_[pos++] = static_cast<int32_t>(v);
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < k; i += kThreads) {
            const int32_t me = sel_[i];
            int32_t r = 0;
            for (int64_t j = 0; j < k; ++j) r += sampling::ranks_before(x_[sel_[j]], sel_[j], x_[me], me);
            cand_[r] = me;
            rank_[i] = r;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            double z = 0.0;
            for (int64_t i = 0; i < k; ++i) z += sampling::weight(x_[sel_[i]], sh_.m, 1.0);
            sh_.z = z;
        }
        __syncthreads();
        return sh_.z;
    }

    // Sum over the valid tokens at or above `floor` of weight(x, m, inv_t): each thread sums its contiguous chunk
    // in id order, then the chunks are summed in order (sh_.sums keeps the chunk sums).
    __device__ double chunked_mass(double inv_t, double floor) {
        const int64_t b = V_ * threadIdx.x / kThreads, e = V_ * (threadIdx.x + 1) / kThreads;
        double s = 0.0;
        for (int64_t v = b; v < e; ++v)
            if (!isnan(x_[v]) && x_[v] >= floor) s += sampling::weight(x_[v], sh_.m, inv_t);
        sh_.sums[threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            double z = 0.0;
            for (int t = 0; t < kThreads; ++t) z += sh_.sums[t];
            sh_.z = z;
        }
        __syncthreads();
        return sh_.z;
    }

    __device__ void run(int64_t r) {
        const RowParams p = a_.params[r];
        int32_t* counts = a_.counts + r * V_;
        if (p.penalised()) {
            for (int64_t v = threadIdx.x; v < V_; v += kThreads) x_[v] = sampling::penalise(x_[v], counts[v], p);
            __syncthreads();
        }
        find_max();
        const bool live = sh_.m > -INFINITY;
        int32_t id = static_cast<int32_t>(sh_.argmax);
        if (p.forced > 0 && p.forced <= V_)
            id = p.forced - 1;
        else if (p.temperature != 0.0f && live)
            id = draw_token(p, sampling::draw_number(*a_.step, a_.step_offset, p));
        if (p.logprobs >= 0) {
            const double log_z = live ? log(chunked_mass(1.0, -INFINITY)) : 0.0;
            const int64_t n = p.logprobs < sh_.valid ? p.logprobs : sh_.valid;
            if (n > 0) best(n);
            if (threadIdx.x == 0) {
                auto lp = [&](int32_t v) {
                    return live ? static_cast<float>(sampling::log_weight(x_[v], sh_.m) - log_z) : -INFINITY;
                };
                float* out = a_.logprobs + r * (1 + sampling::kMaxLogprobs);
                int32_t* top = a_.top_ids + r * sampling::kMaxLogprobs;
                out[0] = lp(id);
                for (int64_t i = 0; i < sampling::kMaxLogprobs; ++i) {
                    top[i] = i < n ? cand_[i] : -1;
                    out[1 + i] = i < n ? lp(cand_[i]) : -INFINITY;
                }
            }
        }
        if (threadIdx.x == 0) {
            a_.ids[r] = id;
            counts[id] += 1;
        }
    }

   private:
    // The maximum over the non-NaN logits and the lowest index holding it (argmax_row's answer: 0 for a row of NaN
    // only), and the count of non-NaN logits, in one pass: each thread keeps its first best, then warps and the
    // block reduce (value, index) pairs, which have one best under that order whatever the reduction's shape.
    __device__ void find_max() {
        float m = -INFINITY;
        int64_t valid = 0, arg = -1;
        for (int64_t v = threadIdx.x; v < V_; v += kThreads) {
            if (isnan(x_[v])) continue;
            ++valid;
            if (arg < 0 || x_[v] > m) m = x_[v], arg = v;
        }
        const auto take = [&](float om, int64_t oarg) {
            if (oarg >= 0 && (arg < 0 || om > m || (om == m && oarg < arg))) m = om, arg = oarg;
        };
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float om = __shfl_xor_sync(0xffffffffu, m, o);
            const int64_t oarg = __shfl_xor_sync(0xffffffffu, arg, o);
            valid += __shfl_xor_sync(0xffffffffu, valid, o);
            take(om, oarg);
        }
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (lane == 0) {
            sh_.sums[warp] = m;
            sh_.counts[warp] = arg;
            sh_.counts[kWarps + warp] = valid;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            valid = sh_.counts[kWarps];
            for (int w = 1; w < kWarps; ++w) {
                take(static_cast<float>(sh_.sums[w]), sh_.counts[w]);
                valid += sh_.counts[kWarps + w];
            }
            sh_.m = arg >= 0 ? m : -INFINITY;
            sh_.argmax = arg >= 0 ? arg : 0;
            sh_.valid = valid;
        }
        __syncthreads();
    }

    __device__ int32_t draw_token(const RowParams& p, uint32_t draw) {
        const double inv_t = 1.0 / static_cast<double>(p.temperature);
        const double floor = sampling::min_p_floor(sh_.m, p.min_p);
        const double u = sampling::uniform(p.seed_lo, p.seed_hi, draw);
        const int64_t valid = sh_.valid;
        const bool top_k = p.top_k > 0 && p.top_k < valid;
        if (!top_k && p.top_p >= 1.0f) {
            const double target = u * chunked_mass(inv_t, floor);
            if (threadIdx.x == 0) {
                double cum = 0.0;
                int32_t id = static_cast<int32_t>(sh_.argmax);
                int t = 0;
                while (t + 1 < kThreads && cum + sh_.sums[t] <= target) cum += sh_.sums[t++];
                for (int64_t v = V_ * t / kThreads, e = V_ * (t + 1) / kThreads; v < e; ++v) {
                    if (isnan(x_[v]) || x_[v] < floor) continue;
                    cum += sampling::weight(x_[v], sh_.m, inv_t);
                    if (cum > target) {
                        id = static_cast<int32_t>(v);
                        break;
                    }
                }
                sh_.id = id;
            }
            __syncthreads();
            return sh_.id;
        }
        int64_t n = top_k ? p.top_k : (valid < 64 ? valid : 64);
        double z = best(n);
        if (p.top_p < 1.0f) {
            if (!top_k) z = chunked_mass(1.0, -INFINITY);
            const double goal = static_cast<double>(p.top_p) * z;
            for (;;) {
                if (threadIdx.x == 0) {
                    double cum = 0.0;
                    int64_t keep = 0;
                    while (keep < n) {
                        cum += sampling::weight(x_[cand_[keep++]], sh_.m, 1.0);
                        if (cum >= goal) break;
                    }
                    sh_.n = cum >= goal || top_k || n == valid ? keep : -1;
                }
                __syncthreads();
                const int64_t keep = sh_.n;
                __syncthreads();
                if (keep >= 0) {
                    n = keep;
                    break;
                }
                n = n * 8 < valid ? n * 8 : valid;
                best(n);
            }
        }
        // Walk the selection in id order over the kept ranks (the top-p prefix, then min_p's floor).
        if (threadIdx.x == 0) sh_.id = static_cast<int32_t>(sh_.argmax);
        __syncthreads();
        const int64_t selected = last_k_;
        if (threadIdx.x == 0) {
            auto kept = [&](int64_t i) {
                return rank_[i] < n && static_cast<double>(x_[sel_[i]]) >= floor;
            };
            double w = 0.0;
            for (int64_t i = 0; i < selected; ++i)
                if (kept(i)) w += sampling::weight(x_[sel_[i]], sh_.m, inv_t);
            const double target = u * w;
            double cum = 0.0;
            for (int64_t i = 0; i < selected; ++i) {
                if (!kept(i)) continue;
                cum += sampling::weight(x_[sel_[i]], sh_.m, inv_t);
                if (cum > target) {
                    sh_.id = sel_[i];
                    break;
                }
            }
        }
        __syncthreads();
        return sh_.id;
    }

    const SampleDeviceArgs& a_;
    float* x_;
    int64_t V_;
    int32_t* sel_;
    int32_t* cand_;
    int32_t* rank_;
    Shared& sh_;
    int64_t last_k_ = 0;
};

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleDeviceArgs a) {
    __shared__ Shared sh;
    Row(a, blockIdx.x, sh).run(blockIdx.x);
}

// One block per row: thread 0 adds the bias entries in order (an id may repeat), then every thread masks words.
__global__ void __launch_bounds__(kThreads) adjust_kernel(AdjustDeviceArgs a) {
    const int64_t r = blockIdx.x;
    const int32_t mask_on = a.flags[2 * r];
    const int32_t n = min(max(a.flags[2 * r + 1], 0), sampling::kMaxLogitBias);
    if (mask_on == 0 && n == 0) return;
    float* x = a.logits + r * a.vocab;
    if (threadIdx.x == 0) {
        for (int32_t j = 0; j < n; ++j) {
            const int32_t id = a.bias_ids[r * sampling::kMaxLogitBias + j];
            if (id >= 0 && id < a.vocab) x[id] += a.bias_values[r * sampling::kMaxLogitBias + j];
        }
    }
    __syncthreads();
    if (mask_on == 0) return;
    const uint32_t* m = a.mask + r * a.words;
    for (int64_t w = threadIdx.x; w < a.words; w += kThreads) {
        const uint32_t bits = m[w];
        if (bits == ~0u) continue;
        for (int64_t i = 0, end = min(int64_t{32}, a.vocab - 32 * w); i < end; ++i)
            if (((bits >> i) & 1u) == 0) x[32 * w + i] = -INFINITY;
    }
}

}  // namespace

void adjust_logits(const AdjustDeviceArgs& a, int64_t rows, void* stream) {
    if (rows == 0) return;
    adjust_kernel<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
    check_launch("adjust_logits");
}

size_t sampling_workspace_bytes(int64_t max_rows, int64_t vocab) {
    return static_cast<size_t>(max_rows) * 3 * static_cast<size_t>(vocab) * sizeof(int32_t);
}

void sample(const SampleDeviceArgs& a, int64_t rows, void* stream) {
    if (rows == 0) return;
    sample_kernel<<<static_cast<unsigned>(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
    check_launch("sample");
}

}  // namespace tracelm::cuda
