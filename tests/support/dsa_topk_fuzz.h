// Random dsa_topk cases and the checks run on each, shared by the seeded ctest subset (test_dsa_topk.cpp)
// and the long fuzz run (dsa_topk_fuzz.cpp).
//
// The oracle is written from the semantics alone: its own window clamp and its own rank rule, applied
// by counting, for every window key, the keys that rank above it (O(n^2) in the worst case). It shares no code
// with the implementations, so a fault in the shared order_key or clamp_window shows up as a mismatch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "ops/dsa/dsa_topk.h"
#include "backends/cpu/kernels/dsa_topk.h"

namespace tracelm::dsa::fuzz {

// Counts over a chunk s[a, b) (shorter than 2^31, so 32-bit counters, which vectorise better): scores at
// least x, above x, and not NaN.
inline int64_t count_at_least(const float* s, int64_t a, int64_t b, float x) {
    int32_t n = 0;
    for (int64_t j = a; j < b; ++j) n += s[j] >= x ? 1 : 0;
    return n;
}
inline int64_t count_above(const float* s, int64_t a, int64_t b, float x) {
    int32_t n = 0;
    for (int64_t j = a; j < b; ++j) n += s[j] > x ? 1 : 0;
    return n;
}
inline int64_t count_numbers(const float* s, int64_t a, int64_t b) {
    int32_t n = 0;
    for (int64_t j = a; j < b; ++j) n += std::isnan(s[j]) ? 0 : 1;
    return n;
}

// Whether key i is among the topk best of window s[lo, hi) (lo <= i < hi): fewer than topk keys rank above it.
// A key ranks above i when its score is greater, or equal with a lower index; a number ranks above NaN, and
// NaNs among themselves by index. Counting stops, chunk by chunk, once the answer is settled.
inline bool in_topk(const float* s, int64_t lo, int64_t hi, int64_t i, int64_t topk) {
    const int64_t n = hi - lo;
    if (n <= topk) return true;
    const float x = s[i];
    const bool nan = std::isnan(x);
    constexpr int64_t kChunk = 1024;
    int64_t above = 0, below = 0;
    for (int64_t j0 = lo; j0 < hi; j0 += kChunk) {
        const int64_t j1 = std::min(hi, j0 + kChunk);
        const int64_t before_end = std::clamp(i, j0, j1);       // [j0, before_end): keys before i
        const int64_t after_begin = std::clamp(i + 1, j0, j1);  // [after_begin, j1): keys after i
        const int64_t a = nan ? (before_end - j0) + count_numbers(s, after_begin, j1)
                              : count_at_least(s, j0, before_end, x) + count_above(s, after_begin, j1, x);
        above += a;
        below += (before_end - j0) + (j1 - after_begin) - a;
        if (above >= topk) return false;
        if (below >= n - topk) return true;
    }
    return above < topk;
}

// Row r's window [lo, hi), empty when hi <= lo; restated here rather than taken from clamp_window.
// A one-row case: `scores` with the window [start, end) and top-k `topk` (the hand-made rows of the tests).
inline TopkCase one_row(std::vector<float> scores, int64_t start, int64_t end, int64_t topk) {
    TopkCase c;
    c.rows = 1;
    c.keys = static_cast<int64_t>(scores.size());
    c.topk = topk;
    c.scores = std::move(scores);
    c.window_start = {start};
    c.window_end = {end};
    return c;
}

inline int64_t window_lo(const TopkCase& c, int64_t r) {
    return std::max<int64_t>(c.window_start[static_cast<size_t>(r)], 0);
}
inline int64_t window_hi(const TopkCase& c, int64_t r) {
    return std::min<int64_t>(c.window_end[static_cast<size_t>(r)], c.keys);
}
inline int64_t window_size(const TopkCase& c, int64_t r) {
    const int64_t lo = window_lo(c, r), hi = window_hi(c, r);
    return hi > lo ? hi - lo : 0;
}

inline std::vector<int64_t> rank_count_oracle(const TopkCase& c) {
    std::vector<int64_t> out(static_cast<size_t>(c.rows * c.topk), -1);
    for (int64_t r = 0; r < c.rows; ++r) {
        const float* s = c.scores.data() + r * c.keys;
        const int64_t lo = window_lo(c, r), hi = window_hi(c, r);
        int64_t* row = out.data() + r * c.topk;
        int64_t k = 0;
        for (int64_t i = lo; i < hi; ++i) {
            if (in_topk(s, lo, hi, i, c.topk)) row[k++] = i;
        }
    }
    return out;
}

// ---- random cases ----

inline float from_bits(uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof(f));
    return f;
}

// Scores every fill draws from now and then: NaNs (both signs, with payloads), infinities, both zeros,
// denormals and the extremes.
inline float special(std::mt19937_64& rng) {
    static const float kSpecials[] = {from_bits(0x7fc00000u), from_bits(0xffc00000u), from_bits(0x7f800001u),
                                      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                      0.0f, -0.0f, std::numeric_limits<float>::denorm_min(),
                                      -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                                      std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(), 1.0f,
                                      -1.0f};
    return kSpecials[rng() % std::size(kSpecials)];
}

// How a row's scores are drawn.
enum class Fill { Normal, Quantized, AllEqual, Specials, RandomBits, Narrow, Adjacent, Sorted, Sprinkled, kCount };

inline void fill_row(float* s, int64_t n, Fill fill, std::mt19937_64& rng) {
    std::normal_distribution<float> normal;
    switch (fill) {
        case Fill::Normal:
            for (int64_t i = 0; i < n; ++i) s[i] = normal(rng);
            break;
        case Fill::Quantized: {  // tie-heavy: a few distinct values
            float values[4];
            const size_t q = 1 + rng() % 4;
            for (size_t v = 0; v < q; ++v) {
                values[v] = rng() % 4 == 0 ? special(rng) : static_cast<float>(static_cast<int>(rng() % 5) - 2);
            }
            for (int64_t i = 0; i < n; ++i) s[i] = values[rng() % q];
            break;
        }
        case Fill::AllEqual: {
            const float v = rng() % 2 == 0 ? special(rng) : normal(rng);
            std::fill(s, s + n, v);
            break;
        }
        case Fill::Specials:
            for (int64_t i = 0; i < n; ++i) s[i] = special(rng);
            break;
        case Fill::RandomBits:
            for (int64_t i = 0; i < n; ++i) s[i] = from_bits(static_cast<uint32_t>(rng()));
            break;
        case Fill::Narrow: {  // shares the leading key bits: the later radix digits decide
            const float base = normal(rng);
            for (int64_t i = 0; i < n; ++i) s[i] = base * (1.0f + 1e-6f * static_cast<float>(rng() % 64));
            break;
        }
        case Fill::Adjacent: {  // neighbouring bit patterns: only the last digit differs
            uint32_t base;
            const float b = normal(rng);
            std::memcpy(&base, &b, sizeof(base));
            for (int64_t i = 0; i < n; ++i) s[i] = from_bits(base + static_cast<uint32_t>(rng() % 1024));
            break;
        }
        case Fill::Sorted:
            for (int64_t i = 0; i < n; ++i) s[i] = normal(rng);
            if (rng() % 2 == 0) {
                std::sort(s, s + n);
            } else {
                std::sort(s, s + n, [](float a, float b) { return a > b; });
            }
            break;
        case Fill::Sprinkled:
            for (int64_t i = 0; i < n; ++i) s[i] = rng() % 8 == 0 ? special(rng) : normal(rng);
            break;
        case Fill::kCount:
            break;
    }
}

inline int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Most windows are ordinary; the rest are empty, offset, partly or wholly out of range, or extreme.
inline void random_window(std::mt19937_64& rng, int64_t keys, int64_t& start, int64_t& end) {
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
    switch (rng() % 10) {
        case 0: case 1: case 2: case 3:
            start = 0, end = keys;
            break;
        case 4: case 5:  // causal prefix
            start = 0, end = uniform(rng, 0, keys);
            break;
        case 6:  // anywhere, edges a little out of range
            start = uniform(rng, -3, keys + 3), end = uniform(rng, -3, keys + 3);
            if (start > end) std::swap(start, end);
            break;
        case 7:  // empty or reversed
            start = uniform(rng, -2, keys + 2), end = start - uniform(rng, 0, 3);
            break;
        case 8:  // entirely out of range
            if (rng() % 2 == 0) {
                start = keys + uniform(rng, 0, 5), end = start + uniform(rng, 0, 10);
            } else {
                end = -uniform(rng, 0, 5), start = end - uniform(rng, 0, 10);
            }
            break;
        default: {  // extremes of int64
            const int64_t pick[] = {kMin, kMin + 1, -1, 0, keys, kMax - 1, kMax};
            start = pick[rng() % std::size(pick)], end = pick[rng() % std::size(pick)];
            break;
        }
    }
}

// Shape classes, by how often they are drawn: most cases small, a few with tens of thousands of keys, and
// 1 in 5000 with up to 131072.
inline TopkCase random_case(std::mt19937_64& rng) {
    TopkCase c;
    const uint64_t size_class = rng() % 5000;
    if (size_class < 2750) {
        c.rows = rng() % 100 == 0 ? 0 : uniform(rng, 1, 8);
        c.keys = uniform(rng, 0, 64);
    } else if (size_class < 4100) {
        c.rows = uniform(rng, 1, 6);
        c.keys = uniform(rng, 65, 700);
    } else if (size_class < 4850) {
        c.rows = uniform(rng, 1, 3);
        c.keys = uniform(rng, 701, 4096);
    } else if (size_class < 4999) {
        c.rows = uniform(rng, 1, 2);
        c.keys = uniform(rng, 4097, 32768);
    } else {
        c.rows = 1;
        c.keys = uniform(rng, 32769, 131072);
    }
    c.scores.resize(static_cast<size_t>(c.rows * c.keys));
    for (int64_t r = 0; r < c.rows; ++r) {
        fill_row(c.scores.data() + r * c.keys, c.keys, static_cast<Fill>(rng() % static_cast<int>(Fill::kCount)), rng);
        int64_t start, end;
        random_window(rng, c.keys, start, end);
        c.window_start.push_back(start);
        c.window_end.push_back(end);
    }
    // topk around the first row's window (or nk), or a size used in practice, or any up to 4096 (a bound
    // that keeps the oracle's cost down on the largest rows).
    const int64_t n = c.rows > 0 ? window_size(c, 0) : c.keys;
    const int64_t any = uniform(rng, 1, std::min<int64_t>(c.keys + 2, 4096));
    const int64_t pick[] = {1, n - 1, n, n + 1, 512, 1024, 2048, any, 2};
    c.topk = std::max<int64_t>(1, pick[rng() % std::size(pick)]);
    return c;
}

// Largest cases random_case makes, for sizing the device buffers once.
constexpr int64_t kMaxRows = 8, kMaxKeys = 131072, kMaxTopk = 131073;

// Runs every CPU implementation on a case and compares each with the oracle.
class Checker {
   public:
    explicit Checker(int threads) : backend_(threads), runner_(backend_, kMaxRows, kMaxKeys, kMaxTopk) {}

    // Every CPU implementation's indices, named: the reference, the backend op (active ISA, rows split over
    // the pool's threads) and the kernel on each ISA this CPU runs.
    std::vector<std::pair<std::string, std::vector<int64_t>>> run_all(const TopkCase& c) {
        std::vector<std::pair<std::string, std::vector<int64_t>>> out;
        out.emplace_back("reference", topk_reference(c));
        out.emplace_back("backend op", runner_.run(c));
        for (const cpu::Isa isa : {cpu::Isa::Portable, cpu::Isa::Avx2}) {
            if (isa <= cpu::best_isa()) out.emplace_back(std::string("kernel ") + cpu::isa_name(isa), kernel(c, isa));
        }
        return out;
    }

    // Empty when every implementation equals the oracle; otherwise the first difference.
    std::string check(const TopkCase& c) {
        const std::vector<int64_t> want = rank_count_oracle(c);
        for (const auto& [impl, got] : run_all(c)) {
            std::string diff = compare(impl, got, want, c);
            if (!diff.empty()) return diff;
        }
        return "";
    }

   private:
    std::vector<int64_t> kernel(const TopkCase& c, cpu::Isa isa) {
        scratch_.resize(static_cast<size_t>(topk_cpu_slot_elems(c.keys)));
        std::vector<int64_t> out(static_cast<size_t>(c.rows * c.topk));
        const TopkCpuArgs a{c.scores.data(), c.window_start.data(), c.window_end.data(), out.data(), scratch_.data(),
                            c.rows, c.keys, c.topk, 0, 1, isa, {}};
        topk_cpu_range(a, 0, 1);
        return out;
    }

    static std::string compare(const std::string& impl, const std::vector<int64_t>& got,
                               const std::vector<int64_t>& want, const TopkCase& c) {
        if (got.size() != want.size()) return impl + ": " + std::to_string(got.size()) + " indices, want " +
                                              std::to_string(want.size());
        for (size_t i = 0; i < got.size(); ++i) {
            if (got[i] != want[i]) {
                return impl + " differs from the oracle: rows " + std::to_string(c.rows) + ", keys " +
                       std::to_string(c.keys) + ", topk " + std::to_string(c.topk) + "; row " +
                       std::to_string(i / static_cast<size_t>(c.topk)) + " position " +
                       std::to_string(i % static_cast<size_t>(c.topk)) + ": got " + std::to_string(got[i]) +
                       ", want " + std::to_string(want[i]);
            }
        }
        return "";
    }

    cpu::CpuBackend backend_;
    TopkRunner runner_;
    std::vector<uint32_t> scratch_;
};

// The case as the CLI reads it (tracelm dsa-topk --input), for reproducing a failure.
inline std::string case_json(const TopkCase& c) {
    auto score = [](float x) -> std::string {
        if (std::isnan(x)) return "\"nan\"";
        if (std::isinf(x)) return x > 0 ? "\"inf\"" : "\"-inf\"";
        if (x == 0.0f && std::signbit(x)) return "\"-0.0\"";
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(x));
        return buf;
    };
    std::string s = "{\"scores\":[";
    for (int64_t r = 0; r < c.rows; ++r) {
        s += r == 0 ? "[" : ",[";
        for (int64_t k = 0; k < c.keys; ++k) {
            if (k > 0) s += ',';
            s += score(c.scores[static_cast<size_t>(r * c.keys + k)]);
        }
        s += ']';
    }
    auto ints = [](const std::vector<int64_t>& v) {
        std::string t = "[";
        for (size_t i = 0; i < v.size(); ++i) {
            if (i > 0) t += ',';
            t += std::to_string(v[i]);
        }
        return t + ']';
    };
    return s + "],\"window_start\":" + ints(c.window_start) + ",\"window_end\":" + ints(c.window_end) +
           ",\"topk\":" + std::to_string(c.topk) + "}";
}

}  // namespace tracelm::dsa::fuzz
