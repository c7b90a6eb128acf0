#include "kv/prefix_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tracelm {

namespace {
// splitmix64's finalizer: a cheap full-avalanche mix (collisions are caught by the token comparison anyway).
uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
uint64_t twin_key(int32_t twin, uint64_t twin_gen) { return mix(mix(static_cast<uint32_t>(twin)) ^ twin_gen); }
}  // namespace

PrefixCache::PrefixCache(int num_blocks, int block_size, uint64_t seed)
    : block_size_(block_size), seed_(seed), blocks_(static_cast<size_t>(std::max(num_blocks, 0))) {
    if (num_blocks <= 0 || block_size <= 0) throw std::invalid_argument("prefix cache: bad geometry");
    // Hand out low block ids first (pop from the back).
    for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

uint64_t PrefixCache::chain(uint64_t prev, const int32_t* tokens, const uint8_t* kinds) const {
    uint64_t h = mix(prev ^ seed_);
    for (int i = 0; i < block_size_; ++i) {
        h = mix(h + (static_cast<uint64_t>(kinds[i]) << 32 | static_cast<uint32_t>(tokens[i])));
    }
    return h;
}

int32_t PrefixCache::find(uint64_t h, const int32_t* tokens, const uint8_t* kinds, int32_t parent) const {
    const auto it = by_hash_.find(h);
    if (it == by_hash_.end()) return -1;
    const Block& b = blocks_[static_cast<size_t>(it->second)];
    if (b.twin >= 0) return -1;
    const bool same_parent =
        b.parent == parent && (parent < 0 || b.parent_gen == blocks_[static_cast<size_t>(parent)].gen);
    return same_parent && std::equal(b.tokens.begin(), b.tokens.end(), tokens) &&
                   std::equal(b.kinds.begin(), b.kinds.end(), kinds)
               ? it->second
               : -1;
}

void PrefixCache::take(int32_t b) {
    Block& blk = blocks_[static_cast<size_t>(b)];
    if (blk.in_lru) {
        lru_.erase(blk.lru);
        blk.in_lru = false;
    }
    ++blk.refs;
}

std::vector<int32_t> PrefixCache::lookup(const int32_t* tokens, const uint8_t* kinds, int max_blocks) const {
    std::vector<int32_t> out;
    uint64_t h = 0;
    int32_t parent = -1;
    for (int i = 0; i < max_blocks; ++i) {
        const int64_t at = static_cast<int64_t>(i) * block_size_;
        h = chain(h, tokens + at, kinds + at);
        const int32_t b = find(h, tokens + at, kinds + at, parent);
        if (b < 0) break;
        out.push_back(b);
        parent = b;
    }
    return out;
}

int PrefixCache::cached(const int32_t* tokens, const uint8_t* kinds, int max_blocks) const {
    return static_cast<int>(lookup(tokens, kinds, max_blocks).size());
}

std::vector<int32_t> PrefixCache::match(const int32_t* tokens, const uint8_t* kinds, int max_blocks) {
    std::vector<int32_t> out = lookup(tokens, kinds, max_blocks);
    for (const int32_t b : out) take(b);
    stats_.hit_blocks += static_cast<int64_t>(out.size());
    stats_.hit_tokens += static_cast<int64_t>(out.size()) * block_size_;
    stats_.query_tokens += static_cast<int64_t>(std::max(max_blocks, 0)) * block_size_;
    return out;
}

void PrefixCache::evict(int32_t b) {
    Block& blk = blocks_[static_cast<size_t>(b)];
    lru_.erase(blk.lru);
    blk.in_lru = false;
    by_hash_.erase(blk.hash);
    blk.cached = false;
    blk.twin = -1;
    blk.tokens.clear();
    blk.kinds.clear();
    ++stats_.evictions;
}

std::vector<int32_t> PrefixCache::allocate(int n) {
    const int available = free_count() + lru_count();
    if (n < 0 || n > available) {
        throw std::runtime_error("KV cache full: " + std::to_string(n) + " blocks of " + std::to_string(block_size_) +
                                 " tokens requested, " + std::to_string(available) + " of " +
                                 std::to_string(num_blocks()) + " free");
    }
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
        int32_t b;
        if (!free_.empty()) {
            b = free_.back();
            free_.pop_back();
        } else {
            b = lru_.front();
            evict(b);
        }
        Block& blk = blocks_[static_cast<size_t>(b)];
        blk.free = false;
        blk.refs = 1;
        ++blk.gen;
        out.push_back(b);
    }
    return out;
}

void PrefixCache::publish(const std::vector<int32_t>& blocks, const int32_t* tokens, const uint8_t* kinds,
                          int full_blocks) {
    uint64_t h = 0;
    int32_t parent = -1;  // the cached block of the previous position in the chain
    for (int i = 0; i < full_blocks; ++i) {
        const int64_t at = static_cast<int64_t>(i) * block_size_;
        const int32_t* t = tokens + at;
        const uint8_t* k = kinds + at;
        h = chain(h, t, k);
        int32_t b = find(h, t, k, parent);
        if (b < 0) {
            // The hash is taken by other contents: a stale entry (its parent was handed out again) or a true
            // 64-bit collision. An unreferenced one gives way; one in use keeps it, and the rest stays private.
            if (!claim(h)) return;
            b = blocks.at(static_cast<size_t>(i));
            Block& blk = blocks_[static_cast<size_t>(b)];
            blk.parent = parent;
            blk.parent_gen = parent < 0 ? 0 : blocks_[static_cast<size_t>(parent)].gen;
            blk.tokens.assign(t, t + block_size_);
            blk.kinds.assign(k, k + block_size_);
            mark_cached(b, h);
        }
        parent = b;
    }
}

bool PrefixCache::claim(uint64_t h) {
    const auto it = by_hash_.find(h);
    if (it == by_hash_.end()) return true;
    const int32_t other = it->second;  // evict() erases the entry
    if (!blocks_[static_cast<size_t>(other)].in_lru) return false;
    evict(other);
    blocks_[static_cast<size_t>(other)].free = true;
    free_.push_back(other);
    return true;
}

void PrefixCache::mark_cached(int32_t b, uint64_t h) {
    Block& blk = blocks_[static_cast<size_t>(b)];
    blk.cached = true;
    blk.hash = h;
    by_hash_.emplace(h, b);
}

void PrefixCache::publish_twin(int32_t block, int32_t twin, uint64_t twin_gen) {
    Block& blk = blocks_.at(static_cast<size_t>(block));
    if (blk.refs <= 0) throw std::invalid_argument("prefix cache: publish of a block that is not held");
    if (blk.cached) return;
    const uint64_t h = twin_key(twin, twin_gen);
    if (!claim(h)) return;
    blk.twin = twin;
    blk.twin_gen = twin_gen;
    mark_cached(block, h);
}

int32_t PrefixCache::find_twin(int32_t twin, uint64_t twin_gen) const {
    const auto it = by_hash_.find(twin_key(twin, twin_gen));
    if (it == by_hash_.end()) return -1;
    const Block& b = blocks_[static_cast<size_t>(it->second)];
    return b.twin == twin && b.twin_gen == twin_gen ? it->second : -1;
}

void PrefixCache::share(int32_t block) {
    if (!blocks_.at(static_cast<size_t>(block)).cached)
        throw std::invalid_argument("prefix cache: share of an unpublished block");
    take(block);
    ++stats_.hit_blocks;
    stats_.hit_tokens += block_size_;
    stats_.query_tokens += block_size_;  // a block of a request's group looked up and found
}

void PrefixCache::release(const std::vector<int32_t>& blocks) {
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
        const int32_t b = *it;
        if (b < 0 || b >= num_blocks() || blocks_[static_cast<size_t>(b)].refs <= 0) {
            throw std::invalid_argument("prefix cache: release of a block that is not held");
        }
        Block& blk = blocks_[static_cast<size_t>(b)];
        if (--blk.refs > 0) continue;
        if (blk.cached) {
            blk.lru = lru_.insert(lru_.end(), b);
            blk.in_lru = true;
        } else {
            blk.free = true;
            free_.push_back(b);
        }
    }
}

PrefixCache::BlockState PrefixCache::state(int32_t block) const {
    const Block& b = blocks_.at(static_cast<size_t>(block));
    return {b.refs, b.cached, b.free, b.in_lru};
}

}  // namespace tracelm
