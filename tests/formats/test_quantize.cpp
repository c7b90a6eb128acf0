// The f32 -> Q8_0 / Q4_0 quantizers against gguf.quants.quantize (the gguf Python package, which reproduces
// ggml-quants.c's reference rounding) on committed fixtures made by scripts/make_quant_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "formats/quantize.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

// testdata/quant/quantize_<type>.bin: f32 rows and gguf's blocks of them (format in the script).
struct QuantizeFixture {
    int64_t rows = 0, cols = 0;
    std::vector<float> input;
    std::vector<uint8_t> blocks;
};

QuantizeFixture load(DType dt, uint32_t ggml_id) {
    const std::string path = testing::repo_path("testdata/quant/quantize_" + std::string(dtype_name(dt)) + ".bin");
    std::ifstream f(path, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    uint32_t hdr[4];
    if (bytes.size() < 20 || std::memcmp(bytes.data(), "TLQI", 4) != 0) throw std::runtime_error("bad fixture " + path);
    std::memcpy(hdr, bytes.data() + 4, sizeof(hdr));
    QuantizeFixture fx{hdr[2], hdr[3], {}, {}};
    const size_t nval = static_cast<size_t>(fx.rows * fx.cols), nblk = dtype_row_bytes(dt, fx.cols) * fx.rows;
    if (hdr[0] != 1 || hdr[1] != ggml_id || bytes.size() != 20 + 4 * nval + nblk)
        throw std::runtime_error("fixture " + path + " does not match its header");
    fx.input.resize(nval);
    std::memcpy(fx.input.data(), bytes.data() + 20, 4 * nval);
    fx.blocks.assign(bytes.begin() + 20 + static_cast<ptrdiff_t>(4 * nval), bytes.end());
    return fx;
}

class QuantizeRow : public ::testing::TestWithParam<std::pair<DType, uint32_t>> {};

TEST_P(QuantizeRow, EqualsGgufQuantizeBitForBit) {
    const auto [dt, id] = GetParam();
    const QuantizeFixture fx = load(dt, id);
    ASSERT_EQ(fx.rows, 11);  // the ten rows of the dequantization fixtures plus the crafted one
    const size_t row_bytes = dtype_row_bytes(dt, fx.cols);
    for (int64_t r = 0; r < fx.rows; ++r) {
        std::vector<uint8_t> got(row_bytes, 0xee);
        quantize_row(dt, fx.input.data() + r * fx.cols, fx.cols, got.data());
        for (size_t b = 0; b < row_bytes / dtype_block_bytes(dt); ++b) {
            const size_t at = r * row_bytes + b * dtype_block_bytes(dt);
            ASSERT_EQ(std::memcmp(got.data() + b * dtype_block_bytes(dt), fx.blocks.data() + at, dtype_block_bytes(dt)), 0)
                << "row " << r << " block " << b;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizeRow,
                         ::testing::Values(std::pair{DType::Q8_0, 8u}, std::pair{DType::Q4_0, 2u}),
                         [](const auto& p) { return std::string(dtype_name(p.param.first)); });

TEST(QuantizeRowPlain, FloatTypesRoundTiesToEven) {
    // Ties: 1 + 2^-8 is halfway between the bf16 values 1 and 1 + 2^-7 (even: 1), 1 + 3 * 2^-8 between 1 + 2^-7
    // and 1 + 2^-6 (even: the latter); likewise 1 + 2^-11 and 1 + 3 * 2^-11 for f16's 10-bit mantissa.
    const float bx[3] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.0f};
    uint16_t bf[3];
    quantize_row(DType::BF16, bx, 3, bf);
    EXPECT_EQ(bf[0], 0x3f80);
    EXPECT_EQ(bf[1], 0x3f82);
    EXPECT_EQ(bf[2], 0xc000);
    const float hx[3] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 0x1p-20f};
    uint16_t h[3];
    quantize_row(DType::F16, hx, 3, h);
    EXPECT_EQ(h[0], 0x3c00);
    EXPECT_EQ(h[1], 0x3c02);
    EXPECT_EQ(h[2], 0x0010);  // subnormal: 2^-20 = 16 units of 2^-24
    float f[3];
    quantize_row(DType::F32, hx, 3, f);
    EXPECT_EQ(std::memcmp(f, hx, sizeof hx), 0);
}

TEST(QuantizeRowErrors, RejectsPartialBlocksAndOtherTypes) {
    std::vector<float> x(64, 1.0f);
    std::vector<uint8_t> out(256);
    EXPECT_THROW(quantize_row(DType::Q8_0, x.data(), 48, out.data()), std::invalid_argument);
    EXPECT_THROW(quantize_row(DType::Q4_1, x.data(), 64, out.data()), std::invalid_argument);
    EXPECT_THROW(quantize_row(DType::I32, x.data(), 4, out.data()), std::invalid_argument);
    EXPECT_FALSE(can_quantize_to(DType::Q5_K));
    EXPECT_TRUE(can_quantize_to(DType::Q4_0));
}

// Q4_K and Q6_K (our own fit): read back by the dequantizer (checked against the gguf package's blocks in
// tests/backends/test_quant.cpp), every value is within half of its sub-block's step, the step bounded by the
// sub-block's range in 15 (Q4_K) or 31 (Q6_K) steps plus one unit of the block's f16 scale.
TEST(QuantizeRowK, EveryValueIsWithinHalfItsSubBlocksStep) {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::vector<float>> rows;
    for (const float spread : {0.02f, 1.0f, 300.0f}) {
        std::vector<float> r(512);
        for (float& v : r) v = spread * normal(rng);
        rows.push_back(r);
    }
    rows.emplace_back(256, 0.0f);
    rows.emplace_back(256, 0.75f);
    rows.emplace_back(256, -2.5f);
    std::vector<float> mixed(256);
    for (size_t i = 0; i < mixed.size(); ++i) mixed[i] = (i / 32 % 2 ? 1e-3f : 1.0f) * normal(rng);
    mixed[77] = 40.0f;
    rows.push_back(mixed);
    for (const DType dt : {DType::Q4_K, DType::Q6_K}) {
        const int sub = dt == DType::Q4_K ? 32 : 16;
        for (size_t r = 0; r < rows.size(); ++r) {
            SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", row " << r);
            const std::vector<float>& x = rows[r];
            const auto n = static_cast<int64_t>(x.size());
            std::vector<uint8_t> blocks(dtype_row_bytes(dt, n));
            quantize_row(dt, x.data(), n, blocks.data());
            std::vector<float> y(x.size());
            cpu::row_to_f32(blocks.data(), dt, n, y.data());
            for (int64_t b = 0; b < n; b += 256) {
                // Each sub-block's needed step, and the block's unit (the f16 scale, at most 0.1% above the least).
                std::vector<float> need;
                float max_need = 0.0f, max_min = 0.0f, amax = 0.0f;
                for (int64_t j = b; j < b + 256; j += sub) {
                    const auto [lo, hi] = std::minmax_element(x.begin() + j, x.begin() + j + sub);
                    const float low = std::min(0.0f, *lo), high = std::max(0.0f, *hi);
                    max_min = std::max(max_min, -low);
                    amax = std::max({amax, -low, high});
                    need.push_back(dt == DType::Q4_K ? high - low : std::max(-low, high) / 31.0f);
                }
                const float dmin = max_min / 63.0f * 1.001f;
                for (float& v : need) v = dt == DType::Q4_K ? (v + dmin) / 15.0f : v;
                for (const float v : need) max_need = std::max(max_need, v);
                const float unit = max_need / (dt == DType::Q4_K ? 63.0f : 127.0f) * 1.001f;
                for (int64_t i = b; i < b + 256; ++i) {
                    const float step = need[static_cast<size_t>((i - b) / sub)] + unit;
                    ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f * step + 1e-6f * amax) << "element " << i;
                }
            }
        }
    }
}

}  // namespace
}  // namespace tracelm
