// What an engine run produced, for bit-for-bit comparisons of two ways of computing the same sequence.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tracelm::testing {

struct Trace {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;  // after the prefill, then after every step
};

// Same tokens and the same logits, bit for bit.
inline void expect_same(const Trace& a, const Trace& b, const std::string& what) {
    ASSERT_EQ(a.tokens, b.tokens) << what;
    ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
    for (size_t i = 0; i < a.logits.size(); ++i) {
        ASSERT_EQ(a.logits[i].size(), b.logits[i].size());
        ASSERT_EQ(0, std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * sizeof(float)))
            << what << ": logits differ at forward " << i;
    }
}

}  // namespace tracelm::testing
