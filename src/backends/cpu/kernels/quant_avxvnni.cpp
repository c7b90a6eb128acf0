// The AVX2 quantized-weight matmul of quant_x86.inc with AVX-VNNI's vpdpbusd (VEX, 256-bit) for the dot products:
// the AvxVnni Isa's, reached through its dispatch table. One instruction where AVX2 takes vpmaddubsw, vpmaddwd and
// an add; the same integers, so the same results.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/kernels_internal.h"
#include "backends/cpu/kernels/quant.h"

#if !defined(__AVXVNNI__)
#error "quant_avxvnni.cpp is built with -mavxvnni (CMakeLists.txt)"
#endif

namespace tracelm::cpu::avxvnniq {
namespace {
using namespace quant;
#include "backends/cpu/kernels/quant_x86.inc"
}  // namespace
}  // namespace tracelm::cpu::avxvnniq

namespace tracelm::cpu {

const QuantKernels detail::avxvnni_quant = {avxvnniq::matmul, avxvnniq::quantize, avxvnniq::product};

}  // namespace tracelm::cpu
