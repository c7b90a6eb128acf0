// TRACELM_HD marks a function of a header that nvcc also compiles, for code that host and device share (an op's
// semantics written once: ops/dsa/dsa_topk.h, ops/moe/moe.h).
#pragma once

#if defined(__CUDACC__)
#define TRACELM_HD __host__ __device__
#else
#define TRACELM_HD
#endif
