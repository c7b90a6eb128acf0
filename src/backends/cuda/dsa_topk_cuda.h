// CUDA dsa_topk (semantics in ops/dsa/dsa_topk.h). Plain C++ declarations: code compiled by the host compiler
// includes them when the build defines TRACELM_HAVE_CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/dsa/dsa_topk.h"

namespace tracelm::cuda {

// CUDA devices this process can use: 0 when there is none or no driver.
int device_count();

// Device workspace bytes for up to max_rows rows of max_keys keys.
size_t dsa_topk_workspace_bytes(int64_t max_rows, int64_t max_keys);

struct DsaTopkDeviceArgs {
    const float* scores;          // device [rows, keys]
    const int64_t* window_start;  // device [rows]
    const int64_t* window_end;    // device [rows]
    int64_t* indices;             // device [rows, topk]
    void* workspace;              // device, at least dsa_topk_workspace_bytes(rows, keys)
    size_t workspace_bytes;
    int64_t rows, keys, topk;
    dsa::CausalRows causal;  // dsa_topk_causal: the rows' windows from these, not the window arrays
};

// Enqueues dsa_topk on `stream` (a cudaStream_t; null for the legacy default stream): one block per row, no
// allocation and no synchronisation, so the launch can be captured into a CUDA graph. Arguments are checked
// first (std::invalid_argument, nothing launched); a failed launch throws std::runtime_error.
void dsa_topk(const DsaTopkDeviceArgs& a, void* stream);

// For the CLI and tests: copies a host case to the device, runs dsa_topk (captured into a CUDA graph and
// launched from it when `graph` is set) and copies the indices back. An invalid case throws
// std::invalid_argument; no usable device throws std::runtime_error("no CUDA device: ...").
std::vector<int64_t> dsa_topk_host(const dsa::TopkCase& c, bool graph = false);

}  // namespace tracelm::cuda
