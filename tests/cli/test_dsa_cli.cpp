// `tracelm dsa-topk` as outside checks drive it: a JSON case in, {"indices": ...} out, a clear error and a
// non-zero exit for anything invalid.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/test_support.h"

#ifdef TRACELM_HAVE_CUDA
#include "backends/cuda/dsa_topk_cuda.h"
#endif

namespace tracelm {
namespace {

namespace fs = std::filesystem;

using Result = testing::CliResult;

class DsaTopkCli : public ::testing::Test {
   protected:
    fs::path dir;
    void SetUp() override {
        dir = fs::temp_directory_path() / ("tracelm-dsa-cli-" + std::to_string(getpid()) + "-" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir);
    }
    void TearDown() override { fs::remove_all(dir); }

    // Runs `tracelm dsa-topk --input <case> <extra>`; stderr is included when asked.
    Result run(const std::string& case_text, const std::string& extra = "", bool with_stderr = true) {
        const fs::path input = dir / "case.json";
        std::ofstream(input, std::ios::binary) << case_text;
        return testing::run_tracelm("dsa-topk --input '" + input.string() + "' " + extra, with_stderr);
    }
    void expect_error(const std::string& case_text, const std::string& message) {
        const Result r = run(case_text);
        EXPECT_NE(r.code, 0) << case_text << "\n" << r.out;
        EXPECT_NE(r.out.find(message), std::string::npos) << case_text << "\n" << r.out;
    }
};

// A case from JSON fragments: the rows of scores (without the outer brackets), the windows and topk.
std::string row_case(const std::string& scores, const std::string& start, const std::string& end,
                     const std::string& topk) {
    return R"({"scores": [)" + scores + R"(], "window_start": )" + start + R"(, "window_end": )" + end +
           R"(, "topk": )" + topk + "}";
}

const char* kCase = R"({"scores": [[1, "nan", "inf", "-inf", "-0.0", 0, 3], [2, 2, 2, 2, 2, 2, 2]],
                        "window_start": [0, 2], "window_end": [7, 100], "topk": 3})";

TEST_F(DsaTopkCli, PrintsIndicesFromEveryCpuImplementation) {
    // Row 0: inf, then 3, then 1; row 1: a tie over the window [2, 7), the lowest indices win.
    const nlohmann::json want = {{"indices", {{0, 2, 6}, {2, 3, 4}}}};
    for (const char* impl : {"", "--impl fast", "--impl reference"}) {
        const Result r = run(kCase, impl, false);
        ASSERT_EQ(r.code, 0) << impl << ": " << r.out;
        EXPECT_EQ(nlohmann::json::parse(r.out), want) << impl;
    }
    const Result padded = run(R"({"scores": [["-0.0", 0.0]], "window_start": [-5], "window_end": [9], "topk": 4})",
                              "", false);
    ASSERT_EQ(padded.code, 0) << padded.out;
    EXPECT_EQ(nlohmann::json::parse(padded.out), (nlohmann::json{{"indices", {{0, 1, -1, -1}}}}));
    // ±FLT_MAX written in decimal parse to themselves, not to infinities (which would win these ties at index 0).
    const Result extremes = run(row_case(R"([3.4028235e38, "inf"], ["-inf", -3.4028235e38])", "[0, 0]", "[2, 2]", "1"),
                                "", false);
    ASSERT_EQ(extremes.code, 0) << extremes.out;
    EXPECT_EQ(nlohmann::json::parse(extremes.out), nlohmann::json::parse(R"({"indices": [[1], [1]]})"));
    const Result empty = run(R"({"scores": [], "window_start": [], "window_end": [], "topk": 2})", "", false);
    ASSERT_EQ(empty.code, 0) << empty.out;
    EXPECT_EQ(nlohmann::json::parse(empty.out), (nlohmann::json{{"indices", nlohmann::json::array()}}));
}

TEST_F(DsaTopkCli, InvalidCasesFailWithAClearMessage) {
    expect_error(row_case("[1, 2]", "[0]", "[2]", "0"), "topk must be positive");
    expect_error(row_case("[1, 2]", "[0]", "[2]", "-4"), "topk must be positive");
    expect_error(row_case("[1, 2]", "[0]", "[2]", "1.5"), "topk must be an integer");
    expect_error(row_case("[1, 2]", "[0]", "[2]", "1000000000000000"), "would print more than");
    expect_error(row_case("[1, 2]", "[0]", "[2]", "99999999999999999999"), "topk must be an integer");
    expect_error(R"({"scores": 5, "window_start": [0], "window_end": [2], "topk": 1})", "\"scores\" must be an array");
    expect_error(row_case("1, 2", "[0]", "[2]", "1"), "scores[0] must be an array");
    expect_error(row_case("[1, 2], [3]", "[0, 0]", "[2, 2]", "1"), "rows must have equal length");
    expect_error(row_case("[1, \"NaN\"]", "[0]", "[2]", "1"), "scores[0][1]");
    expect_error(row_case("[1, null]", "[0]", "[2]", "1"), "scores[0][1]");
    expect_error(row_case("[1, 1e39]", "[0]", "[2]", "1"), "beyond the f32 range");
    expect_error(row_case("[1, 2]", "[0, 0]", "[2]", "1"), "one entry per row");
    expect_error(row_case("[1, 2]", "[0]", "[2.5]", "1"), "window_end[0]");
    expect_error(R"({"scores": [[1, 2]], "window_start": [0], "topk": 1})", "missing \"window_end\"");
    expect_error(R"([1, 2, 3])", "expected a JSON object");
    expect_error(R"({"scores": [[1, 2]], )", "invalid JSON");
    const Result bad_impl = run(kCase, "--impl gpu");
    EXPECT_NE(bad_impl.code, 0) << bad_impl.out;
    const Result missing = run(kCase, "--input /nonexistent/case.json");
    EXPECT_NE(missing.code, 0) << missing.out;
}

TEST_F(DsaTopkCli, CudaImplementationRunsOrSaysWhyNot) {
    const Result r = run(kCase, "--impl cuda");
#ifdef TRACELM_HAVE_CUDA
    if (cuda::device_count() > 0) {
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_EQ(nlohmann::json::parse(r.out), (nlohmann::json{{"indices", {{0, 2, 6}, {2, 3, 4}}}}));
        return;
    }
    EXPECT_NE(r.out.find("no CUDA device"), std::string::npos) << r.out;
#else
    EXPECT_NE(r.out.find("no CUDA support"), std::string::npos) << r.out;
#endif
    EXPECT_NE(r.code, 0) << r.out;
    // Argument errors come first, device or not.
    const Result bad = run(R"({"scores": [[1]], "window_start": [0], "window_end": [1], "topk": 0})", "--impl cuda");
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.out.find("topk must be positive"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace tracelm
