// <immintrin.h> for the *_avx512.cpp kernel files. GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized on
// their own _mm512_undefined_*() (GCC bug 105593), so those warnings are off for the header alone.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
