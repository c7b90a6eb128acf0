// Recorded graphs drop the barrier between ops that cannot see each other's memory effects, and
// keep it wherever one op reads or writes what an earlier op of the same phase writes.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cpu/footprint.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using cpu::ByteRange;
using cpu::Footprint;
using cpu::Phase;

Footprint reads_writes(std::vector<ByteRange> r, std::vector<ByteRange> w) {
    Footprint f;
    for (auto x : r) f.reads[static_cast<size_t>(f.n_reads++)] = x;
    for (auto x : w) f.write(x);
    return f;
}

TEST(BarrierElision, PhaseAdmitsOnlyIndependentOps) {
    Phase p;
    p.add(reads_writes({{0, 100}}, {{100, 200}}));
    EXPECT_TRUE(p.admits(reads_writes({{0, 100}}, {{200, 300}})));    // shares only an input
    EXPECT_FALSE(p.admits(reads_writes({{150, 160}}, {{300, 400}})));  // reads what the phase writes
    EXPECT_FALSE(p.admits(reads_writes({{300, 400}}, {{50, 60}})));    // writes what the phase reads
    EXPECT_FALSE(p.admits(reads_writes({}, {{199, 201}})));            // writes what the phase writes
    EXPECT_TRUE(p.admits(reads_writes({{200, 210}}, {{210, 220}})));   // touching ends do not overlap
    p.clear();
    EXPECT_TRUE(p.admits(reads_writes({{150, 160}}, {{0, 100}})));
}

TEST(BarrierElision, OverflowingFootprintWidensInsteadOfDropping) {
    Footprint f;
    for (uintptr_t i = 0; i < Footprint::kMax + 2; ++i) f.write(ByteRange{i * 100, i * 100 + 10});
    EXPECT_EQ(f.n_writes, Footprint::kMax);
    Phase p;
    p.add(f);
    // The ranges past kMax were merged into the last one, so a write into any of them still conflicts.
    EXPECT_FALSE(p.admits(reads_writes({}, {{(Footprint::kMax + 1) * 100, (Footprint::kMax + 1) * 100 + 1}})));
}

class GraphBarriers : public testing::BackendTest {
   protected:
    GraphBarriers() : BackendTest(7) {}
};

TEST_F(GraphBarriers, IndependentProjectionsShareAPhaseAndReplayEqualsEager) {
    const int64_t K = 64, N = 48;
    const Tensor x = f32("x", 1, K, randn(K));
    const Tensor wa = f32("wa", N, K, randn(N * K)), wb = f32("wb", N, K, randn(N * K));
    const Tensor a = f32("a", 1, N, std::vector<float>(N)), b = f32("b", 1, N, std::vector<float>(N));
    const Tensor c = f32("c", 1, N, std::vector<float>(N));
    be.matmul(x, wa, nullptr, a);
    be.matmul(x, wb, nullptr, b);
    be.add(a, b, c);
    const auto eager = get<float>(c);

    be.upload(c, std::vector<float>(N, 0.0f).data());
    be.begin_capture();
    be.matmul(x, wa, nullptr, a);
    be.matmul(x, wb, nullptr, b);
    be.add(a, b, c);
    const GraphId g = be.end_capture();
    EXPECT_EQ(be.graph_nodes(g), 3u);
    EXPECT_EQ(be.graph_barriers(g), 2u);
    be.replay(g);
    EXPECT_EQ(get<float>(c), eager);
}

TEST_F(GraphBarriers, InPlaceChainKeepsEveryBarrier) {
    const int64_t n = 4096;
    const Tensor x = f32("x", 1, n, randn(n)), y = f32("y", 1, n, randn(n));
    be.begin_capture();
    be.add(x, y, x);  // x += y, three times: each reads what the previous wrote
    be.add(x, y, x);
    be.add(x, y, x);
    const GraphId g = be.end_capture();
    EXPECT_EQ(be.graph_barriers(g), 3u);
}

}  // namespace
}  // namespace tracelm
