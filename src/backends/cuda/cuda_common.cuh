// Device helpers shared by the CUDA backend's kernel files (*.cu): weight and KV-type dispatch, widening loads,
// warp and block sums. Activations and the KV cache are f32 (or an f16 cache); weights are f32, bf16 or f16 and are
// widened to f32 as they are read, with f32 accumulation everywhere. Kernels templated on the weight type are
// instantiated for those three types only.
#pragma once

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "runtime/backend.h"
#include "runtime/dtype.h"

namespace tracelm::cuda::ops {

inline constexpr float kInf = INFINITY;

template <DType D>
using WeightTag = std::integral_constant<DType, D>;

// Calls f(WeightTag<D>{}) for the weight type dt.
template <typename F>
void with_weight_type(DType dt, F&& f) {
    switch (dt) {
        case DType::F32: f(WeightTag<DType::F32>{}); return;
        case DType::BF16: f(WeightTag<DType::BF16>{}); return;
        case DType::F16: f(WeightTag<DType::F16>{}); return;
        default: throw std::invalid_argument("cuda: no kernel for weight type " + std::string(dtype_name(dt)));
    }
}

template <DType D>
__device__ __forceinline__ float load_w(const void* p, int64_t i) {
    if constexpr (D == DType::F32) {
        return static_cast<const float*>(p)[i];
    } else if constexpr (D == DType::BF16) {
        return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
    } else {
        return __half2float(static_cast<const __half*>(p)[i]);
    }
}

// Calls f(WeightTag<D>{}) for the KV cache type dt (f32 or f16, as checks::kv_cache allows).
template <typename F>
void with_kv_type(DType dt, F&& f) {
    if (dt == DType::F16) {
        f(WeightTag<DType::F16>{});
    } else {
        f(WeightTag<DType::F32>{});
    }
}

// Stores v at element i of a KV cache of type C (f16: rounded to nearest even). Reads go through load_w<C>.
template <DType C>
__device__ __forceinline__ void store_kv(void* p, int64_t i, float v) {
    if constexpr (C == DType::F16) {
        static_cast<__half*>(p)[i] = __float2half_rn(v);
    } else {
        static_cast<float*>(p)[i] = v;
    }
}

// Eight consecutive weights from element k of a row (16-byte aligned).
template <DType D>
__device__ __forceinline__ void load_w8(const void* row, int64_t k, float (&out)[8]) {
    if constexpr (D == DType::F32) {
        const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(row) + k);
        const float4 a = p[0], b = p[1];
        out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else {
        const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(row) + k);
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if constexpr (D == DType::BF16) {
                out[2 * j] = __uint_as_float(words[j] << 16);
                out[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
            } else {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
                out[2 * j] = f.x;
                out[2 * j + 1] = f.y;
            }
        }
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block, returned to every thread. `shared` holds 32 floats; every thread must call it.
__device__ inline float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += shared[w];
    __syncthreads();  // shared is reused by the next call
    return total;
}

inline unsigned blocks_for(int64_t n, int threads) {
    return static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 1 << 16));
}

// act(g) of a gated MLP (runtime/backend.h's Activation).
__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
}
__device__ __forceinline__ float activate(Activation act, float g) {
    switch (act) {
        case Activation::Silu: return g / (1.0f + expf(-g));
        case Activation::GeluTanh: return gelu_tanh(g);
        case Activation::GeluTanhF16:
            if (g <= -10.0f) return 0.0f;
            if (g >= 10.0f) return g;
            return __half2float(__float2half(gelu_tanh(__half2float(__float2half(g)))));
    }
    return 0.0f;
}

}  // namespace tracelm::cuda::ops
