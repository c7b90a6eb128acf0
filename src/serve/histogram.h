// A fixed-bucket histogram of seconds, as Prometheus histograms count them (cumulative buckets on output).
#pragma once

#include <cstdint>
#include <vector>

namespace tracelm::serve {

struct Histogram {
    std::vector<double> bounds;    // upper bounds, ascending; a last implicit bucket is +Inf
    std::vector<uint64_t> counts;  // per bucket (not cumulative), bounds.size() + 1 entries
    double sum = 0.0;
    uint64_t count = 0;

    explicit Histogram(std::vector<double> upper_bounds)
        : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

    void observe(double v) {
        size_t i = 0;
        while (i < bounds.size() && v > bounds[i]) ++i;
        ++counts[i];
        sum += v;
        ++count;
    }
};

}  // namespace tracelm::serve
