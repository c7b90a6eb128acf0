// Paged KV cache: per layer, K and V pools of `num_blocks * block_size` slots of f32 or f16 values, preallocated
// once.
// Sequences own blocks through a block table row; slot = block * block_size + offset. Which blocks are free, shared
// or cached is the PrefixCache's business (kv/prefix_cache.h).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/backend.h"

namespace tracelm {

class PagedKvCache {
   public:
    PagedKvCache(Backend& backend, int layers, int64_t kv_dim, int num_blocks, int block_size,
                 DType dtype = DType::F32);
    ~PagedKvCache();
    PagedKvCache(const PagedKvCache&) = delete;
    PagedKvCache& operator=(const PagedKvCache&) = delete;

    int block_size() const { return block_size_; }
    int num_blocks() const { return num_blocks_; }
    DType dtype() const { return dtype_; }
    const Tensor& k(int layer) const { return k_[static_cast<size_t>(layer)]; }
    const Tensor& v(int layer) const { return v_[static_cast<size_t>(layer)]; }
    size_t bytes() const { return bytes_; }

    // Blocks needed to hold `tokens` tokens.
    int blocks_for(int64_t tokens) const { return static_cast<int>((tokens + block_size_ - 1) / block_size_); }

   private:
    Backend& backend_;
    int num_blocks_, block_size_;
    DType dtype_;
    size_t bytes_ = 0;
    std::vector<Buffer*> buffers_;
    std::vector<Tensor> k_, v_;
};

}  // namespace tracelm
