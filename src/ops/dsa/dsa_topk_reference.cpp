// The reference dsa_topk: sort each row's window by rank, keep the first topk, put them in key order.
// Written from the rank order itself (float comparisons), not from order_key, so the fast kernels' key
// transform is checked against something independent of it.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

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

[[noreturn]] void fail_reference(const char* what) {
    throw std::invalid_argument(std::string("dsa_topk reference: ") + what);
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

std::vector<int64_t> topk_causal_reference(TopkCase c, const std::vector<int32_t>& query_start_loc,
                                           const std::vector<int32_t>& seq_lens) {
    if (query_start_loc.size() != seq_lens.size() + 1) fail_reference("one query start per sequence and one more");
    c.window_start.assign(static_cast<size_t>(c.rows), 0);
    c.window_end.assign(static_cast<size_t>(c.rows), 0);  // rows of no sequence: empty windows
    for (size_t s = 0; s < seq_lens.size(); ++s) {
        const int64_t q_len = query_start_loc[s + 1] - query_start_loc[s];
        for (int64_t i = 0; i < q_len; ++i)
            c.window_end.at(static_cast<size_t>(query_start_loc[s] + i)) = seq_lens[s] - q_len + i + 1;
    }
    return topk_reference(c);
}

}  // namespace tracelm::dsa
