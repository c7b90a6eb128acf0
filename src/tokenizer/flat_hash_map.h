// A minimal open-addressing hash map (linear probing, insert and find only) for the tokenizer's
// large read-mostly tables. Compared with std::unordered_map it keeps entries in one array and
// compares stored hashes before keys, which roughly halves load time and speeds up the merge
// lookups that dominate BPE encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace tracelm::tokenizer_detail {

// Hash must accept every type find() is called with and hash equal keys alike; Eq likewise.
template <class Key, class Value, class Hash, class Eq>
class FlatHashMap {
   public:
    explicit FlatHashMap(size_t expected = 0) { rehash(expected); }

    // Inserts unless the key is present; returns whether it inserted.
    bool try_emplace(Key key, Value value) {
        if ((size_ + 1) * 4 > slots_.size() * 3) rehash(2 * size_ + 1);
        const uint64_t h = hash_of(key);
        size_t i = index_of(h);
        for (; slots_[i].used; i = (i + 1) & mask_) {
            if (slots_[i].hash == h && Eq{}(slots_[i].key, key)) return false;
        }
        slots_[i] = Slot{std::move(key), std::move(value), h, true};
        ++size_;
        return true;
    }

    template <class K>
    const Value* find(const K& key) const {
        const uint64_t h = hash_of(key);
        for (size_t i = index_of(h); slots_[i].used; i = (i + 1) & mask_) {
            if (slots_[i].hash == h && Eq{}(slots_[i].key, key)) return &slots_[i].value;
        }
        return nullptr;
    }

   private:
    struct Slot {
        Key key{};
        Value value{};
        uint64_t hash = 0;
        bool used = false;
    };

    template <class K>
    static uint64_t hash_of(const K& key) {
        // Fibonacci scrambling, so hashes that are weak in the low bits still spread out.
        return static_cast<uint64_t>(Hash{}(key)) * 0x9E3779B97F4A7C15ull;
    }
    size_t index_of(uint64_t h) const { return static_cast<size_t>(h >> shift_); }

    // Sizes the table (a power of two) for `n` entries at a load factor of at most 3/4 and
    // reinserts everything.
    void rehash(size_t n) {
        size_t capacity = 16;
        int bits = 4;
        while (capacity * 3 < n * 4) {
            capacity *= 2;
            ++bits;
        }
        std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(capacity));
        mask_ = capacity - 1;
        shift_ = 64 - bits;
        size_ = 0;
        for (Slot& s : old) {
            if (s.used) try_emplace(std::move(s.key), std::move(s.value));
        }
    }

    std::vector<Slot> slots_;
    size_t mask_ = 0;
    int shift_ = 64;
    size_t size_ = 0;
};

}  // namespace tracelm::tokenizer_detail
