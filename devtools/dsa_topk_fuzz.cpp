// The long dsa_topk fuzz run: dsa_topk_fuzz --shapes N --seed S [--threads T]. Every shape goes through the
// reference, the CPU backend op and the fast kernel on each ISA this CPU runs, all compared with the O(n^2)
// rank-count oracle (see dsa_topk_fuzz.h). On a mismatch it prints the difference and the case as CLI JSON,
// and exits 1.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/dsa_topk_fuzz.h"

int main(int argc, char** argv) {
    int64_t shapes = 1000000;
    uint64_t seed = 1;
    int threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--shapes") {
            shapes = std::atoll(argv[i + 1]);
        } else if (flag == "--seed") {
            seed = std::strtoull(argv[i + 1], nullptr, 10);
        } else if (flag == "--threads") {
            threads = std::atoi(argv[i + 1]);
        } else {
            std::fprintf(stderr, "usage: dsa_topk_fuzz [--shapes N] [--seed S] [--threads T]\n");
            return 2;
        }
    }
    if (argc % 2 == 0) {
        std::fprintf(stderr, "usage: dsa_topk_fuzz [--shapes N] [--seed S] [--threads T]\n");
        return 2;
    }

    using namespace tracelm::dsa;
    fuzz::Checker checker(threads);
    std::mt19937_64 rng(seed);
    const auto t0 = std::chrono::steady_clock::now();
    int64_t rows = 0, window_keys = 0, largest = 0, over_32k = 0;
    for (int64_t i = 0; i < shapes; ++i) {
        const TopkCase c = fuzz::random_case(rng);
        const std::string diff = checker.check(c);
        if (!diff.empty()) {
            std::fprintf(stderr, "shape %lld of seed %llu: %s\ncase: %s\n", static_cast<long long>(i),
                         static_cast<unsigned long long>(seed), diff.c_str(), fuzz::case_json(c).c_str());
            return 1;
        }
        rows += c.rows;
        for (int64_t r = 0; r < c.rows; ++r) window_keys += fuzz::window_size(c, r);
        largest = std::max(largest, c.keys);
        over_32k += c.keys > 32768 ? 1 : 0;
        if ((i + 1) % 100000 == 0) {
            std::printf("%lld shapes ok (%.0f s)\n", static_cast<long long>(i + 1),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            std::fflush(stdout);
        }
    }
    std::printf("ok: %lld shapes, seed %llu: %lld rows, %lld window keys, largest nk %lld, "
                "%lld shapes with nk > 32768; %.1f s\n",
                static_cast<long long>(shapes), static_cast<unsigned long long>(seed), static_cast<long long>(rows),
                static_cast<long long>(window_keys), static_cast<long long>(largest), static_cast<long long>(over_32k),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
}
