// The f16 attention kernels with AVX2+FMA+F16C: the intrinsics ggml-cpu's AVX2 build runs, in its order
// (attention_f16_x86.inc). Internal and self-contained, as kernels_internal.h requires.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/kernels/kernels_internal.h"

namespace tracelm::cpu::avx2_f16_attention {
namespace {
#include "backends/cpu/kernels/attention_f16_x86.inc"
}  // namespace
}  // namespace tracelm::cpu::avx2_f16_attention

namespace tracelm::cpu {

const F16AttentionKernels detail::avx2_f16_attention = {
    avx2_f16_attention::to_f16, avx2_f16_attention::scores, avx2_f16_attention::soft_max, avx2_f16_attention::accumulate,
    avx2_f16_attention::attend_tile};

}  // namespace tracelm::cpu
