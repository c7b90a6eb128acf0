// ggml's scalar float arithmetic that op definitions name (ggml-cpu as llama.cpp builds it for AVX2+FMA;
// docs/ggml-numerics.md): one implementation shared by the op references and the CPU backend, so that both give the
// same bits on every ISA.
#pragma once

#include <cstdint>

namespace tracelm::ggml {

// One lane of ggml_v_expf (vec.h, AVX2+FMA: ARM's optimized-routines expf, max error 1.45 ulp + 0.5), with std::fma
// where it fuses.
float v_expf(float x);

// ggml's SOFT_MAX of one row of n floats (scale 1, no mask; ggml_vec_soft_max_f32 of its AVX2 build) into p:
// m = the max; for each whole group of 8, e = v_expf(x - m) and the group's lanes summed in f32 as
// ((e0 + e4) + (e2 + e6)) + ((e1 + e5) + (e3 + e7)), added to a double total; the last n % 8 with expf, each added
// to the total; then p *= (float)(1 / total). x must hold no NaN; m must be finite.
void soft_max_row(const float* x, float* p, int64_t n);

}  // namespace tracelm::ggml
