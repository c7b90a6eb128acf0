// Paged KV cache: per layer, K and V pools of `num_blocks * block_size` slots of f32 or f16 values, preallocated
// once. DeepSeek's latent attention keeps other pools at the same slots (KvLayout): one latent pool as K, no V, and
// the indexer's keys as the auxiliary pool. Sliding-window layers (Gemma's local layers) may have pools of their own, of `sliding_blocks` blocks, in which
// a sequence holds only the blocks of its window: their block numbers are another table's.
// Sequences own blocks through a block table row; slot = block * block_size + offset. Which blocks are free, shared
// or cached is the PrefixCache's business (kv/prefix_cache.h).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/backend.h"

namespace tracelm {

// Values per slot of each pool of a layer; 0: no such pool.
struct KvLayout {
    int64_t k_dim = 0;
    int64_t v_dim = 0;
    int64_t aux_dim = 0;
};

class PagedKvCache {
   public:
    // sliding: per layer, 1 where the layer's K/V live in the sliding pool (empty, or sliding_blocks 0: none).
    PagedKvCache(Backend& backend, int layers, KvLayout layout, int num_blocks, int block_size,
                 DType dtype = DType::F32, const std::vector<uint8_t>& sliding = {}, int sliding_blocks = 0);
    // K and V pools of kv_dim values.
    PagedKvCache(Backend& backend, int layers, int64_t kv_dim, int num_blocks, int block_size,
                 DType dtype = DType::F32, const std::vector<uint8_t>& sliding = {}, int sliding_blocks = 0)
        : PagedKvCache(backend, layers, KvLayout{kv_dim, kv_dim, 0}, num_blocks, block_size, dtype, sliding,
                       sliding_blocks) {}
    ~PagedKvCache();
    PagedKvCache(const PagedKvCache&) = delete;
    PagedKvCache& operator=(const PagedKvCache&) = delete;

    int block_size() const { return block_size_; }
    int num_blocks() const { return num_blocks_; }
    int sliding_blocks() const { return sliding_blocks_; }
    // Whether the layer's K/V are in the sliding pool.
    bool in_sliding_pool(int layer) const { return in_sliding_pool(sliding_, sliding_blocks_, layer); }
    // The bytes a cache of these arguments allocates (bytes()), known before it is made: what a device must hold.
    static size_t bytes_for(int layers, KvLayout layout, int num_blocks, int block_size, DType dtype,
                            const std::vector<uint8_t>& sliding = {}, int sliding_blocks = 0);
    DType dtype() const { return dtype_; }
    const Tensor& k(int layer) const { return k_[static_cast<size_t>(layer)]; }
    const Tensor& v(int layer) const { return v_.at(static_cast<size_t>(layer)); }
    const Tensor& aux(int layer) const { return aux_.at(static_cast<size_t>(layer)); }
    // Every pool of every layer.
    const std::vector<Tensor>& pools() const { return pools_; }
    size_t bytes() const { return bytes_; }

    // Blocks needed to hold `tokens` tokens.
    int blocks_for(int64_t tokens) const { return static_cast<int>((tokens + block_size_ - 1) / block_size_); }

   private:
    static bool in_sliding_pool(const std::vector<uint8_t>& sliding, int sliding_blocks, int layer) {
        return sliding_blocks > 0 && static_cast<size_t>(layer) < sliding.size() && sliding[static_cast<size_t>(layer)];
    }
    // Slots of each of one layer's pools.
    static int64_t slots_of(const std::vector<uint8_t>& sliding, int sliding_blocks, int num_blocks, int block_size,
                            int layer) {
        return static_cast<int64_t>(in_sliding_pool(sliding, sliding_blocks, layer) ? sliding_blocks : num_blocks) *
               block_size;
    }

    Backend& backend_;
    int num_blocks_, block_size_;
    std::vector<uint8_t> sliding_;
    int sliding_blocks_ = 0;
    DType dtype_;
    size_t bytes_ = 0;
    std::vector<Buffer*> buffers_;
    std::vector<Tensor> k_, v_, aux_, pools_;
};

}  // namespace tracelm
