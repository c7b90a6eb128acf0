// The f16 attention kernels of attention_f16_x86.inc with the prefill tiles on 512-bit vectors (AVX-512F/DQ): the
// same operations per lane as the AVX2 build, so the same bits, with half the instructions. Internal and
// self-contained, as kernels_internal.h requires.
#include "backends/cpu/kernels/immintrin_avx512.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/kernels/kernels_internal.h"

#if !defined(__AVX512F__) || !defined(__AVX512DQ__)
#error "attention_f16_avx512.cpp is built with -mavx512f -mavx512dq (CMakeLists.txt)"
#endif

namespace tracelm::cpu::avx512_f16_attention {
namespace {
#include "backends/cpu/kernels/attention_f16_x86.inc"
}  // namespace
}  // namespace tracelm::cpu::avx512_f16_attention

namespace tracelm::cpu {

const F16AttentionKernels detail::avx512_f16_attention = {
    avx512_f16_attention::to_f16, avx512_f16_attention::scores, avx512_f16_attention::soft_max, avx512_f16_attention::accumulate,
    avx512_f16_attention::attend_tile};

}  // namespace tracelm::cpu
