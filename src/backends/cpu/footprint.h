// The memory an op reads and writes, used when recording a graph to drop the barrier between two
// ops that cannot see each other's effects (e.g. the q, k and v projections of one layer).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace tracelm::cpu {

struct ByteRange {
    uintptr_t begin = 0, end = 0;
    bool overlaps(const ByteRange& o) const { return begin < o.end && o.begin < end; }
};

inline ByteRange byte_range(const Tensor& t) {
    const auto b = reinterpret_cast<uintptr_t>(t.raw());
    return {b, b + t.nbytes()};
}

// Up to kMax ranges read and kMax written; a range an op updates in place is listed as written
// (writes are checked against both reads and writes of earlier ops).
struct Footprint {
    static constexpr int kMax = 8;
    std::array<ByteRange, kMax> reads{}, writes{};
    int n_reads = 0, n_writes = 0;

    Footprint& read(const Tensor& t) { return add(reads, n_reads, byte_range(t)); }
    Footprint& write(const Tensor& t) { return add(writes, n_writes, byte_range(t)); }
    Footprint& write(ByteRange r) { return add(writes, n_writes, r); }
    Footprint& read(ByteRange r) { return add(reads, n_reads, r); }

   private:
    Footprint& add(std::array<ByteRange, kMax>& list, int& n, ByteRange r) {
        // More ranges than fit: widen the last one to cover both, which only adds false conflicts.
        if (n == kMax) {
            list[kMax - 1] = {std::min(list[kMax - 1].begin, r.begin), std::max(list[kMax - 1].end, r.end)};
        } else {
            list[static_cast<size_t>(n++)] = r;
        }
        return *this;
    }
};

// The ops recorded since the last barrier. An op may join them (run without a barrier before it)
// only if it reads nothing they write and writes nothing they read or write.
class Phase {
   public:
    bool admits(const Footprint& f) const {
        for (int i = 0; i < f.n_reads; ++i)
            if (hits(writes_, f.reads[static_cast<size_t>(i)])) return false;
        for (int i = 0; i < f.n_writes; ++i) {
            const ByteRange& w = f.writes[static_cast<size_t>(i)];
            if (hits(writes_, w) || hits(reads_, w)) return false;
        }
        return true;
    }
    void add(const Footprint& f) {
        reads_.insert(reads_.end(), f.reads.begin(), f.reads.begin() + f.n_reads);
        writes_.insert(writes_.end(), f.writes.begin(), f.writes.begin() + f.n_writes);
    }
    void clear() {
        reads_.clear();
        writes_.clear();
    }

   private:
    static bool hits(const std::vector<ByteRange>& list, const ByteRange& r) {
        for (const ByteRange& x : list)
            if (x.overlaps(r)) return true;
        return false;
    }
    std::vector<ByteRange> reads_, writes_;
};

}  // namespace tracelm::cpu
