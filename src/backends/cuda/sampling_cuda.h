// CUDA sample (semantics in ops/sampling/sampling.h). Plain C++ declarations for cuda_backend.cu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/sampling/sampling.h"

namespace tracelm::cuda {

struct SampleDeviceArgs {
    float* logits;  // device [rows, vocab], penalised in place
    const sampling::RowParams* params;
    int32_t* counts;
    const int32_t* step;
    int step_offset;
    int32_t* ids;
    float* logprobs;
    int32_t* top_ids;
    int32_t* workspace;  // at least sampling_workspace_bytes(rows, vocab)
    int64_t vocab;
};

size_t sampling_workspace_bytes(int64_t max_rows, int64_t vocab);
// Enqueues sample on `stream` (a cudaStream_t): one block per row, no allocation, no synchronisation.
void sample(const SampleDeviceArgs& a, int64_t rows, void* stream);

struct AdjustDeviceArgs {
    float* logits;  // device [rows, vocab]
    const int32_t* flags;
    const uint32_t* mask;
    const int32_t* bias_ids;
    const float* bias_values;
    int64_t vocab, words;
};
// Enqueues adjust_logits on `stream`: one block per row.
void adjust_logits(const AdjustDeviceArgs& a, int64_t rows, void* stream);

}  // namespace tracelm::cuda
