// What the op files of the CPU backend (ops/*.cpp) share: how an op call becomes a recorded or dispatched CpuOp
// (CpuBackend::submit), and helpers used by more than one op family. Not for use outside backends/cpu/.
#pragma once

#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/paged_attention.h"
#include "runtime/op_checks.h"

namespace tracelm::cpu {

template <typename Args, typename... Worker>
void CpuBackend::submit(void (*fn)(const Args&, int64_t, int64_t, Worker...), const Args& args, const Footprint& fp,
                        int64_t items, int64_t grain, int64_t chunk) {
    static_assert(sizeof...(Worker) == 0 || std::is_same_v<std::tuple<Worker...>, std::tuple<OpWorker>>);
    static_assert(sizeof(Args) + sizeof(fn) <= CpuOp::kArgBytes, "op arguments too large");
    static_assert(std::is_trivially_copyable_v<Args>);
    CpuOp op;
    // Type erasure without casting function types: the packed bytes hold the typed entry point
    // followed by its arguments, and one trampoline per Args type unpacks them.
    op.fn = [](const void* packed, int64_t b, int64_t e, OpWorker w) {
        void (*typed)(const Args&, int64_t, int64_t, Worker...);
        Args a;
        std::memcpy(&typed, packed, sizeof(typed));
        std::memcpy(&a, static_cast<const unsigned char*>(packed) + sizeof(typed), sizeof(Args));
        if constexpr (sizeof...(Worker) == 0) {
            typed(a, b, e);
        } else {
            typed(a, b, e, w);
        }
    };
    op.items = items;
    op.grain = grain < 1 ? 1 : grain;
    op.chunk = chunk;
    std::memcpy(op.args, &fn, sizeof(fn));
    std::memcpy(op.args + sizeof(fn), &args, sizeof(Args));
    if (capturing()) {
        if (!recording_.empty() && phase_.admits(fp)) {
            recording_.back().barrier = false;
        } else {
            phase_.clear();
        }
        phase_.add(fp);
        recording_.push_back(op);
    } else {
        dispatch(&op, 1);
        ++eager_ops_;
    }
}

// Names of the backend-owned scratch buffers: the activations of quantized matmuls, the f16 attention workspace.
inline constexpr const char* kQuantScratchName = "cpu:matmul_quant_scratch";
inline constexpr const char* kAttentionScratchName = "cpu:attention_f16_scratch";

// Stores a row of `dim` values at a cache slot: as they are in an f32 cache, rounded to f16 in an f16 one.
// Thread i's slice of a scratch buffer: the buffer split evenly between the pool's threads, whatever one op needs,
// so that slice i is the same bytes for every op using the buffer. (Slices sized by each op's need overlapped:
// in a phase of two quantized matmuls of different activation sizes, thread 1's slice of the second lay inside
// thread 0's of the first, which thread 0 could still be reading.) At least the need, 64-byte aligned.
inline size_t scratch_slice_bytes(const Buffer& b, int threads) { return b.bytes / static_cast<size_t>(threads) / 64 * 64; }

inline void store_kv_row(const float* x, void* cache, int64_t slot, int64_t dim, bool f16) {
    if (f16) {
        active_kernels().f16_attention->to_f16(x, static_cast<uint16_t*>(cache) + slot * dim, dim);
    } else {
        std::memcpy(static_cast<float*>(cache) + slot * dim, x, sizeof(float) * static_cast<size_t>(dim));
    }
}

// Resolves the arguments of an attention call, checked by Backend (defined in ops/attention.cpp, used by
// the dense and the sparse attention).
PagedAttentionArgs attention_args(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const AttentionMeta& meta, int heads, int kv_heads, int head_dim, float scale,
                                  const Tensor& out);
Footprint attention_footprint(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                              const Tensor& out);

}  // namespace tracelm::cpu
