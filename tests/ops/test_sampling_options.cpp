// The request's sampling options (ops/sampling/options.h): validation names the CLI flag of a bad value, and a
// seed becomes the device row's two seed words.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "ops/sampling/options.h"
#include "ops/sampling/sampling.h"

namespace tracelm {
namespace {

using sampling::RowParams;

TEST(SamplingOptions, ValidationNamesTheFlag) {
    auto message = [](sampling::SamplingOptions o) {
        try {
            sampling::validate(o);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    sampling::SamplingOptions o;
    EXPECT_EQ(message(o), "");
    o.temperature = -0.5;
    EXPECT_NE(message(o).find("--temperature"), std::string::npos);
    o = {};
    o.temperature = std::nan("");
    EXPECT_NE(message(o).find("--temperature"), std::string::npos);
    o = {};
    o.top_p = 0.0;
    EXPECT_NE(message(o).find("--top-p"), std::string::npos);
    o.top_p = 1.01;
    EXPECT_NE(message(o).find("--top-p"), std::string::npos);
    o = {};
    o.top_k = -1;
    EXPECT_NE(message(o).find("--top-k"), std::string::npos);
    o = {};
    o.logprobs = 21;
    EXPECT_NE(message(o).find("--logprobs"), std::string::npos);
    o = {};
    o.min_p = std::nan("");
    EXPECT_NE(message(o).find("--min-p"), std::string::npos);
    o = {};
    o.seed = 77;
    EXPECT_EQ(sampling::resolve_seed(o), 77u);
    const RowParams p = sampling::row_params(o, 0x123456789abcdefull);
    EXPECT_EQ(p.seed_lo, 0x89abcdefu);
    EXPECT_EQ(p.seed_hi, 0x1234567u);
}

}  // namespace
}  // namespace tracelm
