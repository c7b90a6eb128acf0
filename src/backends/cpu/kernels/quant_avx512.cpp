// The quantized-weight matmul of quant_x86.inc with AVX512_VNNI's vpdpbusd (on 256-bit vectors, AVX512_VL) for
// the dot products, reached through the AVX-512 dispatch table. The Avx512 Isa does not require VNNI, so
// without it the AVX2 kernels run; the integers, and so the results, are the same either way.
#include "backends/cpu/kernels/immintrin_avx512.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/kernels_internal.h"
#include "backends/cpu/kernels/quant.h"

#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__)
#error "quant_avx512.cpp is built with -mavx512vnni -mavx512vl (CMakeLists.txt)"
#endif

namespace tracelm::cpu::avx512q {
namespace {
using namespace quant;
#include "backends/cpu/kernels/quant_x86.inc"

void matmul_vnni_or_avx2(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y,
                         int64_t N, int64_t n0, int64_t n1, void* act, QuantOrder order) {
    if (cpu_features().avx512_vnni)
        matmul(x, T, K, w, wt, bias, y, N, n0, n1, act, order);
    else
        detail::avx2_quant.matmul(x, T, K, w, wt, bias, y, N, n0, n1, act, order);
}

// The two halves choose alike, as their activation layouts differ (the wide tiles' arrays).
void quantize_vnni_or_avx2(const float* x, int64_t T, int64_t K, DType wt, void* act) {
    if (cpu_features().avx512_vnni)
        quantize(x, T, K, wt, act);
    else
        detail::avx2_quant.quantize(x, T, K, wt, act);
}

void product_vnni_or_avx2(const void* act, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y,
                          int64_t N, int64_t n0, int64_t n1, QuantOrder order) {
    if (cpu_features().avx512_vnni)
        product(act, T, K, w, wt, bias, y, N, n0, n1, order);
    else
        detail::avx2_quant.product(act, T, K, w, wt, bias, y, N, n0, n1, order);
}

}  // namespace
}  // namespace tracelm::cpu::avx512q

namespace tracelm::cpu {

const QuantKernels detail::avx512_quant = {avx512q::matmul_vnni_or_avx2, avx512q::quantize_vnni_or_avx2,
                                           avx512q::product_vnni_or_avx2};

}  // namespace tracelm::cpu
