// The benchmarks' wall clock: a monotonic clock and the seconds since a point on it.
#pragma once

#include <chrono>

namespace tracelm::cli {

using BenchClock = std::chrono::steady_clock;

inline double seconds_since(BenchClock::time_point t0) {
    return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

}  // namespace tracelm::cli
