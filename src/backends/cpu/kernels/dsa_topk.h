// The fast CPU dsa_topk kernel. Per row: map the window's scores to order keys (ops/dsa/dsa_topk.h), find
// the topk-th best key by radix selection (11, 11 and 10-bit digits; each pass histograms only the keys
// still tied with it so far), then emit in one ordered pass every key above it and the first ties at it.
// Work is O(n) per row whatever topk is. Rows are split over work items, each with its own scratch slot
// inside a preallocated workspace, so a call allocates nothing and can be recorded into a graph.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/cpu_features.h"
#include "ops/dsa/dsa_topk.h"

namespace tracelm::dsa {

struct TopkCpuArgs {
    const float* scores;          // [rows, keys]
    const int64_t* window_start;  // [rows]
    const int64_t* window_end;    // [rows]
    int64_t* indices;             // [rows, topk]
    uint32_t* scratch;            // `slots` slots of topk_cpu_slot_elems(keys) or more
    int64_t rows, keys, topk;
    int64_t slot_stride;  // elements between scratch slots
    int64_t slots;
    cpu::Isa isa;  // which primitives to use; one this CPU runs (the backend passes active_isa())
    CausalRows causal;  // dsa_topk_causal: the rows' windows from these, not the window arrays (ops/dsa/dsa_topk.h)
};

// Scratch elements one slot needs for rows of up to `keys` keys.
constexpr int64_t topk_cpu_slot_elems(int64_t keys) { return 2 * keys; }

// Work items are scratch slots: item i handles rows [rows*i/slots, rows*(i+1)/slots) in slot i.
void topk_cpu_range(const TopkCpuArgs& a, int64_t begin, int64_t end);

}  // namespace tracelm::dsa
