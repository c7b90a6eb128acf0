#include "ops/dsa/sparse_attention.h"

namespace tracelm::dsa {

void sparse_attention_range(const SparseAttentionArgs& a, int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
        cpu::PagedAttentionItem it(a.attention, item);
        const int64_t* selected = a.indices + item / a.attention.heads * a.topk;
        for (int64_t j = 0; j < a.topk; ++j) {
            if (selected[j] >= 0 && selected[j] < it.visible()) it.attend(selected[j]);
        }
        it.finish();
    }
}

}  // namespace tracelm::dsa
