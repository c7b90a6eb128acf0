// The op conformance suite (support/op_conformance.h) instantiated over the backend registry; its tests are in
// the files of their op family (test_elementwise.cpp, test_norm_rope.cpp, test_matmul.cpp, test_attention.cpp,
// test_decode_state.cpp, test_dsa.cpp, test_moe.cpp). Here only what is not one family's: argument checks across ops.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/op_conformance.h"

namespace tracelm {
namespace {

using namespace conformance;

// Shape errors are std::invalid_argument on every backend, before anything is enqueued (so also inside a
// capture, which stays usable).
TEST_P(OpConformance, RejectsBadShapesBeforeEnqueueing) {
    Buffer* a = be_->alloc(64 * sizeof(float), "a");
    Buffer* b = be_->alloc(64 * sizeof(float), "b");
    const Tensor x = whole(a, DType::F32, 4, 16), w = whole(b, DType::F32, 8, 8);
    EXPECT_THROW(be_->matmul(x, w, nullptr, x), std::invalid_argument);
    // RoPE factors: one per pair of the head, finite and positive.
    Buffer* p = be_->alloc(4 * sizeof(int32_t), "pos");
    const Tensor pos = whole(p, DType::I32, 1, 4);
    const std::vector<float> short_factors(7, 1.0f), nan_factors = {1.0f, 2.0f, std::nanf(""), 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    const std::vector<float> zero_factors = {1.0f, 2.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    for (const std::vector<float>* f : {&short_factors, &nan_factors, &zero_factors})
        EXPECT_THROW(be_->rope_neox(x, pos, 1, 16, RopeSpec{1e4f, *f}), std::invalid_argument);
    EXPECT_THROW(be_->rope_neox(x, pos, 1, 16, RopeSpec{0.0f, {}}), std::invalid_argument);
    be_->begin_capture();
    EXPECT_THROW(be_->add(x, x, whole(a, DType::F32, 2, 16)), std::invalid_argument);
    be_->destroy_graph(be_->end_capture());
    be_->free(p);
    be_->free(a);
    be_->free(b);
}

INSTANTIATE_TEST_SUITE_P(, OpConformance, ::testing::ValuesIn(registered_backends()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace tracelm
