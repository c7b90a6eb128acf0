// Shared between the per-ISA kernel files and the dispatcher; not for other users.
//
// The ISA files (*_avx2.cpp, *_avx512.cpp) must keep everything they define at internal linkage and call
// no inline function or template from shared headers: the linker keeps one copy of such a function, and
// if it picked the AVX2-compiled one, baseline code would execute AVX2 instructions.
#pragma once

#include <cstddef>

#include "backends/cpu/kernels/kernels.h"

namespace tracelm::cpu::detail {

extern const KernelTable portable_kernels;
extern const KernelTable avx2_kernels;
extern const KernelTable avx512_kernels;

// 64-byte aligned memory of at least `bytes`, owned by the calling thread and reused by its next call.
void* scratch(size_t bytes);

}  // namespace tracelm::cpu::detail
