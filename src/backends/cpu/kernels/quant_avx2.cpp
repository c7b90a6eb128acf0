// AVX2 quantized-weight matmul (integer dot products by vpmaddubsw/vpmaddwd; quant_x86.inc), reached only
// through the dispatch table.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/kernels_internal.h"
#include "backends/cpu/kernels/quant.h"

namespace tracelm::cpu::avx2q {
namespace {
using namespace quant;
#include "backends/cpu/kernels/quant_x86.inc"
}  // namespace
}  // namespace tracelm::cpu::avx2q

namespace tracelm::cpu {

const QuantKernels detail::avx2_quant = {avx2q::matmul, avx2q::quantize, avx2q::product};

}  // namespace tracelm::cpu
