// Sparse decode attention for DSA: paged attention restricted to the cached positions dsa_topk selected.
#pragma once

#include <cstdint>

#include "backends/cpu/paged_attention.h"

namespace tracelm::dsa {

struct SparseAttentionArgs {
    cpu::PagedAttentionArgs attention;
    const int64_t* indices;  // [T, topk] cached positions per query row; -1 entries are padding
    int64_t topk;
};

// Items are t * heads + h, as in cpu::paged_attention_range. Positions the row may not see (negative, or at
// or past PagedAttentionItem::visible()) are skipped; the rest are attended in the order given, so ascending
// indices that cover every visible position reproduce paged_attention_range bit for bit.
void sparse_attention_range(const SparseAttentionArgs& a, int64_t begin, int64_t end);

}  // namespace tracelm::dsa
