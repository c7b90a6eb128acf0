// Shared between the per-ISA kernel files and the dispatcher; not for other users.
//
// The ISA files (*_avx2.cpp, *_avxvnni.cpp, *_avx512.cpp) must keep everything they define at internal linkage and call
// no inline function or template from shared headers: the linker keeps one copy of such a function, and
// if it picked the AVX2-compiled one, baseline code would execute AVX2 instructions.
#pragma once

#include <cstddef>

#include "backends/cpu/kernels/kernels.h"

namespace tracelm::cpu::detail {

extern const KernelTable portable_kernels;
extern const KernelTable avx2_kernels;
extern const KernelTable avxvnni_kernels;
extern const KernelTable avx512_kernels;
extern const QuantKernels portable_quant;
extern const QuantKernels avx2_quant;
extern const QuantKernels avxvnni_quant;
extern const QuantKernels avx512_quant;
extern const F16AttentionKernels portable_f16_attention;
extern const F16AttentionKernels avx2_f16_attention;
extern const F16AttentionKernels avx512_f16_attention;

// GGML's reference dequantization of one row of a quantized type (quant_portable.cpp), shared by every Isa:
// an embedding lookup converts one row per token, far from the hot path.
void dequantize_row(const void* src, DType dt, int64_t cols, float* out);
// Row n of a repacked table of N rows (formats/repack.h), equal to dequantize_row of its GGML row.
void dequantize_repacked_row(const void* table, DType dt, int64_t N, int64_t cols, int64_t n, float* out);

// 64-byte aligned memory of at least `bytes`, owned by the calling thread and reused by its next call.
void* scratch(size_t bytes);

}  // namespace tracelm::cpu::detail
