// The CUDA dsa_topk: argument errors everywhere; on a GPU, fuzzed cases against the rank-count oracle, eager
// and launched from a captured CUDA graph. Without a device the GPU tests skip.
#include <gtest/gtest.h>

#ifdef TRACELM_HAVE_CUDA
#include <random>
#include <stdexcept>
#include <string>

#include "backends/cuda/dsa_topk_cuda.h"
#include "support/dsa_topk_fuzz.h"
#endif

namespace tracelm::dsa {
namespace {

#ifdef TRACELM_HAVE_CUDA

TEST(DsaTopkCuda, InvalidArgumentsThrowBeforeTouchingTheDevice) {
    TopkCase c;
    c.rows = 1;
    c.keys = 2;
    c.scores = {1, 2};
    c.window_start = {0};
    c.window_end = {2};
    for (const int64_t topk : {int64_t{0}, int64_t{-2}}) {
        c.topk = topk;
        EXPECT_THROW(cuda::dsa_topk_host(c), std::invalid_argument);
    }
    c.topk = 1;
    c.window_start = {};
    EXPECT_THROW(cuda::dsa_topk_host(c), std::invalid_argument);

    // Device arguments are checked before any launch, so null pointers are never reached.
    cuda::DsaTopkDeviceArgs a{nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, 16, 0, {}};
    EXPECT_THROW(cuda::dsa_topk(a, nullptr), std::invalid_argument);  // topk 0
    a.topk = 8;
    a.keys = -1;
    EXPECT_THROW(cuda::dsa_topk(a, nullptr), std::invalid_argument);
    a.keys = 16;
    EXPECT_THROW(cuda::dsa_topk(a, nullptr), std::invalid_argument);  // no workspace
}

TEST(DsaTopkCuda, MatchesOracleEagerAndFromAGraph) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::mt19937_64 rng(99);
    for (int i = 0; i < 3000; ++i) {
        const TopkCase c = fuzz::random_case(rng);
        const std::vector<int64_t> want = fuzz::rank_count_oracle(c);
        ASSERT_EQ(cuda::dsa_topk_host(c), want) << "shape " << i << ": " << fuzz::case_json(c).substr(0, 2000);
        if (i % 10 == 0) {
            ASSERT_EQ(cuda::dsa_topk_host(c, true), want) << "graph, shape " << i;
        }
    }
}

TEST(DsaTopkCuda, SaysWhenThereIsNoDevice) {
    if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
    TopkCase c;
    c.rows = 1;
    c.keys = 2;
    c.topk = 1;
    c.scores = {1, 2};
    c.window_start = {0};
    c.window_end = {2};
    try {
        cuda::dsa_topk_host(c);
        ADD_FAILURE() << "no error without a device";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    }
}

#else

TEST(DsaTopkCuda, SkipsWhenBuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA (TRACELM_CUDA=OFF or no nvcc)"; }

#endif

}  // namespace
}  // namespace tracelm::dsa
