// What tests inspect inside an Engine beyond its public interface (a friend of Engine): the KV block allocator, the
// rows' positions and admissions, the captured graphs.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/engine.h"

namespace tracelm::testing {

class EngineProbe {
   public:
    explicit EngineProbe(const Engine& e) : e_(e) {}

    // The allocator, whose state tests walk block by block.
    const PrefixCache& prefix_cache() const { return *e_.cache_; }
    // The sliding-window layers' pool's allocator (Gemma 3).
    const PrefixCache& sliding_cache() const { return *e_.sliding_cache_; }
    // Position of the token a decoding row feeds next (the sequence then holds position + 1 tokens).
    int64_t position(int row) const { return e_.rows_.at(static_cast<size_t>(row)).pos; }
    int free_rows() const {
        return static_cast<int>(
            std::count_if(e_.rows_.begin(), e_.rows_.end(), [](const Engine::Row& r) { return !r.admitted; }));
    }
    // Sliding-pool blocks a row holds: those its window maps and its spare ones.
    int sliding_blocks_held(int row) const {
        const Engine::Row& r = e_.rows_.at(static_cast<size_t>(row));
        return static_cast<int>(std::count_if(r.sliding.begin(), r.sliding.end(), [](int32_t b) { return b >= 0; }) +
                                r.sliding_spare.size());
    }
    // Sliding-pool blocks its window maps now.
    int sliding_blocks_mapped(int row) const {
        const Engine::Row& r = e_.rows_.at(static_cast<size_t>(row));
        return static_cast<int>(std::count_if(r.sliding.begin(), r.sliding.end(), [](int32_t b) { return b >= 0; }));
    }
    // Buckets with a captured graph.
    int captured_buckets() const {
        return static_cast<int>(
            std::count_if(e_.graphs_.begin(), e_.graphs_.end(), [](const auto& bg) { return bg.second.graph >= 0; }));
    }

   private:
    const Engine& e_;
};

}  // namespace tracelm::testing
