// The reference dsa_topk: sort each row's window by rank, keep the first topk, put them in key order.
// Written from the rank order itself (float comparisons), not from order_key, so the fast kernels' key
// transform is checked against something independent of it.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/dsa/dsa_topk.h"

namespace tracelm::dsa {

namespace {

// Key a ranks before key b: every number before NaN, higher scores first (-0.0 == +0.0 under float
// comparison), then the lower index.
bool ranks_before(const float* row, int64_t a, int64_t b) {
    const bool nan_a = std::isnan(row[a]), nan_b = std::isnan(row[b]);
    if (nan_a != nan_b) return nan_b;
    if (!nan_a && row[a] != row[b]) return row[a] > row[b];
    return a < b;
}

}  // namespace

std::vector<int64_t> topk_reference(const TopkCase& c) {
    check_case(c);
    std::vector<int64_t> out(static_cast<size_t>(c.rows * c.topk), -1);
    std::vector<int64_t> keys;
    for (int64_t r = 0; r < c.rows; ++r) {
        const KeyWindow w = clamp_window(c.window_start[static_cast<size_t>(r)], c.window_end[static_cast<size_t>(r)],
                                         c.keys);
        keys.resize(static_cast<size_t>(w.size));
        std::iota(keys.begin(), keys.end(), w.begin);
        if (w.size > c.topk) {
            const float* row = c.scores.data() + r * c.keys;
            std::sort(keys.begin(), keys.end(), [row](int64_t a, int64_t b) { return ranks_before(row, a, b); });
            keys.resize(static_cast<size_t>(c.topk));
            std::sort(keys.begin(), keys.end());
        }
        std::copy(keys.begin(), keys.end(), out.begin() + r * c.topk);
    }
    return out;
}

}  // namespace tracelm::dsa
