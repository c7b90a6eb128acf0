#include "kv/paged_kv_cache.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace tracelm {

PagedKvCache::PagedKvCache(Backend& backend, int layers, KvLayout layout, int num_blocks, int block_size, DType dtype,
                           const std::vector<uint8_t>& sliding, int sliding_blocks)
    : backend_(backend), num_blocks_(num_blocks), block_size_(block_size), sliding_(sliding),
      sliding_blocks_(sliding_blocks), dtype_(dtype) {
    if (num_blocks <= 0 || block_size <= 0 || layout.k_dim <= 0 || layout.v_dim < 0 || layout.aux_dim < 0 ||
        layers <= 0 || sliding_blocks < 0 ||
        (!sliding.empty() && sliding.size() != static_cast<size_t>(layers))) {
        throw std::invalid_argument("kv cache: bad geometry");
    }
    if (dtype != DType::F32 && dtype != DType::F16) {
        throw std::invalid_argument("kv cache: dtype must be f32 or f16, not " + std::string(dtype_name(dtype)));
    }
    for (int l = 0; l < layers; ++l) {
        const int64_t slots = slots_of(sliding, sliding_blocks, num_blocks, block_size, l);
        const std::pair<const char*, int64_t> pools[] = {{"k", layout.k_dim}, {"v", layout.v_dim}, {"aux", layout.aux_dim}};
        for (const auto& [kind, dim] : pools) {
            if (dim == 0) continue;
            const std::string name = "kv_cache." + std::to_string(l) + "." + kind;
            Buffer* b = backend.alloc(static_cast<size_t>(slots) * dtype_row_bytes(dtype, dim), name);
            buffers_.push_back(b);
            pools_.push_back(whole(b, dtype, slots, dim));
            (kind[0] == 'k' ? k_ : kind[0] == 'v' ? v_ : aux_).push_back(pools_.back());
            bytes_ += b->bytes;
        }
    }
}

size_t PagedKvCache::bytes_for(int layers, KvLayout layout, int num_blocks, int block_size, DType dtype,
                               const std::vector<uint8_t>& sliding, int sliding_blocks) {
    const size_t row = dtype_row_bytes(dtype, layout.k_dim) + dtype_row_bytes(dtype, layout.v_dim) +
                       dtype_row_bytes(dtype, layout.aux_dim);
    size_t bytes = 0;
    for (int l = 0; l < layers; ++l)
        bytes += static_cast<size_t>(slots_of(sliding, sliding_blocks, num_blocks, block_size, l)) * row;
    return bytes;
}

PagedKvCache::~PagedKvCache() {
    for (Buffer* b : buffers_) backend_.free(b);
}

}  // namespace tracelm
