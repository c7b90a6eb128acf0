// KV block allocator with automatic prefix caching.
//
// Every block of the paged KV cache is free, referenced by sequences (refs > 0), or cached and unreferenced. A
// full block whose contents are known is published under a hash chained over the positions of every block before
// it and its own, seeded with whatever else decides the KV values (model, KV dtype, RoPE, block size). A position
// is its token id and how it was computed (its `kind`: the engine's forwards of one row and of several sum
// attention in different orders, so the same tokens computed differently are different KV). A later prompt whose
// leading full blocks have the same chain shares those blocks (references) instead of recomputing them.
// Unreferenced cached blocks stay cached until the pool needs free blocks; then the least recently released is
// evicted first. A shared block is never written: blocks are published only once fully written, and a sequence
// writes only into blocks past its shared prefix.
//
// Hash collisions cannot return wrong KV: a match also compares the block's stored token ids and kinds and its
// parent (the block it chains from, with that block's generation, which changes whenever the block is handed out
// again), so a matched chain holds exactly the prompt's tokens, computed the way asked for.
//
// The sliding-window layers' pool (engine.h) publishes its blocks under a *twin* instead: the block of the global
// pool that holds the same positions of the same sequence, with that block's generation. The twin's verified chain
// names the prefix, so a sliding block is shared exactly when its twin is matched and has not been handed out again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace tracelm {

struct PrefixCacheStats {
    int64_t hit_blocks = 0;  // blocks shared instead of recomputed
    int64_t hit_tokens = 0;  // prompt tokens whose KV came from shared blocks
    int64_t query_tokens = 0;  // prompt tokens looked up (whole blocks): hit_tokens of them were found
    int64_t evictions = 0;   // cached blocks dropped to make room
};

class PrefixCache {
   public:
    PrefixCache(int num_blocks, int block_size, uint64_t seed);

    int num_blocks() const { return static_cast<int>(blocks_.size()); }
    int block_size() const { return block_size_; }

    // Shares the longest run of cached blocks that hold tokens[0, k * block_size) computed as kinds[0, k *
    // block_size) say, for k <= max_blocks, taking a reference on each; the stats count them.
    std::vector<int32_t> match(const int32_t* tokens, const uint8_t* kinds, int max_blocks);
    // How many blocks match() would share, without taking them or counting them.
    int cached(const int32_t* tokens, const uint8_t* kinds, int max_blocks) const;
    // n blocks for private use (one reference each), evicting unreferenced cached blocks in LRU order when the
    // free list runs short. Throws a clear "KV cache full" error when fewer than n can be had.
    std::vector<int32_t> allocate(int n);
    // Declares blocks[0, full_blocks) fully written with tokens[0, full_blocks * block_size), computed as kinds
    // says, and publishes those not cached yet. A block whose chain is already cached under another id stays
    // private (it is freed on release).
    void publish(const std::vector<int32_t>& blocks, const int32_t* tokens, const uint8_t* kinds, int full_blocks);
    // Drops one reference per block; the last block goes first to the LRU list, so a chain's tail is evicted before
    // its head.
    void release(const std::vector<int32_t>& blocks);
    // The leading cached blocks match() would share (no reference taken).
    std::vector<int32_t> lookup(const int32_t* tokens, const uint8_t* kinds, int max_blocks) const;
    // Bumped whenever the block is handed out by allocate(): a twin is the block together with its generation.
    uint64_t generation(int32_t block) const { return blocks_.at(static_cast<size_t>(block)).gen; }

    // ---- Blocks published under a twin (a block of another PrefixCache, at a generation of it) ----
    // Publishes a held block as the twin's, unless it is published already; an unreferenced block under the same
    // key gives way, one in use keeps it.
    void publish_twin(int32_t block, int32_t twin, uint64_t twin_gen);
    // The block published as the twin's, or -1.
    int32_t find_twin(int32_t twin, uint64_t twin_gen) const;
    // Takes a reference on a block find_twin() returned; the stats count it.
    void share(int32_t block);

    const PrefixCacheStats& stats() const { return stats_; }

    // Allocator state, for tests.
    struct BlockState {
        int refs = 0;
        bool cached = false;  // published (findable by its chain)
        bool free = false;    // on the free list
        bool in_lru = false;  // unreferenced and cached, evictable
    };
    BlockState state(int32_t block) const;
    int free_count() const { return static_cast<int>(free_.size()); }
    int lru_count() const { return static_cast<int>(lru_.size()); }

   private:
    struct Block {
        int refs = 0;
        bool cached = false;
        bool free = true;
        uint64_t gen = 0;  // bumped whenever the block is handed out by allocate()
        uint64_t hash = 0;
        int32_t parent = -1;
        uint64_t parent_gen = 0;
        int32_t twin = -1;  // published under a twin instead of a chain
        uint64_t twin_gen = 0;
        std::vector<int32_t> tokens;
        std::vector<uint8_t> kinds;
        std::list<int32_t>::iterator lru;
        bool in_lru = false;
    };

    uint64_t chain(uint64_t prev, const int32_t* tokens, const uint8_t* kinds) const;
    // The cached block with chain hash h holding `tokens` computed as `kinds` after `parent`, or -1.
    int32_t find(uint64_t h, const int32_t* tokens, const uint8_t* kinds, int32_t parent) const;
    void take(int32_t b);   // one more reference
    void evict(int32_t b);  // unpublish an unreferenced cached block
    // Makes way for a block to be published under hash h: true when h is free (an unreferenced block holding it is
    // evicted), false when a block in use holds it.
    bool claim(uint64_t h);
    void mark_cached(int32_t b, uint64_t h);

    int block_size_;
    uint64_t seed_;
    std::vector<Block> blocks_;
    std::vector<int32_t> free_;  // unreferenced, uncached; low ids at the back
    std::list<int32_t> lru_;     // unreferenced, cached; least recently released first
    std::unordered_map<uint64_t, int32_t> by_hash_;
    PrefixCacheStats stats_;
};

}  // namespace tracelm
