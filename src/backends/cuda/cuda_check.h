// Turns a CUDA runtime error into std::runtime_error("CUDA <what>: <reason>"). For the .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace tracelm::cuda {

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

// After a kernel launch: launch-configuration errors are reported here, not by the launch itself.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

}  // namespace tracelm::cuda
