// GGML block-quantized weights on the CPU: dequantization against the gguf Python package (fixtures made by
// scripts/make_quant_fixtures.py), the integer-domain matmul against double-precision math on the dequantized
// weights within a derived bound, agreement between instruction sets, independence of the work split, and the
// backend ops eager and replayed; the fast numerics' repacked types against the same math on GGML's blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/quant.h"
#include "formats/repack.h"
#include "support/test_support.h"

namespace tracelm {
namespace {

using cpu::Isa;
using testing::runnable_isas;

const DType kQuantTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                             DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// GGML's type ids (ggml.h), as the fixtures record them.
uint32_t ggml_type_id(DType dt) {
    switch (dt) {
        case DType::Q4_0: return 2;
        case DType::Q4_1: return 3;
        case DType::Q5_0: return 6;
        case DType::Q5_1: return 7;
        case DType::Q8_0: return 8;
        case DType::Q4_K: return 12;
        case DType::Q5_K: return 13;
        default: return 14;  // Q6_K
    }
}

// The fast numerics' repacked forms of the 32-element types.
const DType kRepackedTypes[] = {DType::Q8_0_R16, DType::Q4_0_R16, DType::Q4_1_R16, DType::Q5_0_R16,
                                DType::Q5_1_R16, DType::Q4_K_R16, DType::Q5_K_R16, DType::Q6_K_R16};

const DType kAllMatmulTypes[] = {DType::Q8_0,     DType::Q4_0,     DType::Q4_1,     DType::Q5_0,    DType::Q5_1,
                                  DType::Q4_K,     DType::Q5_K,     DType::Q6_K,     DType::Q8_0_R16, DType::Q4_0_R16,
                                  DType::Q4_1_R16, DType::Q5_0_R16, DType::Q5_1_R16, DType::Q4_K_R16,
                                  DType::Q5_K_R16, DType::Q6_K_R16};

std::string type_name(DType dt) { return std::string(dtype_name(dt)); }

// Written here rather than taken from dtype.h, so the bound below does not rest on the code under test.
double decode_f16(const uint8_t* p) {
    const int h = p[0] | (p[1] << 8);
    const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    const double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
    return sign != 0 ? -v : v;
}

// testdata/quant/<type>.bin: raw blocks and gguf's dequantization of them (format in the script).
struct Fixture {
    DType dt;
    int64_t rows = 0, cols = 0;
    size_t row_bytes = 0;
    std::vector<uint8_t> blocks;
    std::vector<float> values;
};

// The bytes of a committed fixture file, which must start with the 4-byte `magic` and hold at least min_bytes.
std::vector<uint8_t> read_fixture(const std::string& path, const char* magic, size_t min_bytes) {
    std::ifstream f(path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.size() < min_bytes || std::memcmp(bytes.data(), magic, 4) != 0) throw std::runtime_error("bad fixture " + path);
    return bytes;
}

Fixture load_fixture(DType dt) {
    dt = dtype_unpacked(dt);
    const std::string path = testing::repo_path("testdata/quant/" + type_name(dt) + ".bin");
    const std::vector<uint8_t> bytes = read_fixture(path, "TLQF", 20);
    uint32_t hdr[4];
    std::memcpy(hdr, bytes.data() + 4, sizeof(hdr));
    Fixture fx{dt, hdr[2], hdr[3], 0, {}, {}};
    fx.row_bytes = dtype_row_bytes(dt, fx.cols);
    const size_t nblk = fx.row_bytes * static_cast<size_t>(fx.rows), nval = static_cast<size_t>(fx.rows * fx.cols);
    if (hdr[0] != 1 || hdr[1] != ggml_type_id(dt) || !dtype_row_ok(dt, fx.cols) ||
        bytes.size() != 20 + nblk + 4 * nval)
        throw std::runtime_error("fixture " + path + " does not match its header");
    fx.blocks.assign(bytes.begin() + 20, bytes.begin() + 20 + static_cast<ptrdiff_t>(nblk));
    fx.values.resize(nval);
    std::memcpy(fx.values.data(), bytes.data() + 20 + nblk, 4 * nval);
    return fx;
}

// A weight matrix of N rows of K = 2 * fixture columns, row n being fixture rows a(n) and b(n) side by side
// (blocks are self-contained, so rows of blocks concatenate), with its gguf-dequantized values.
struct Weights {
    DType dt;
    int64_t N, K;
    std::vector<uint8_t> bytes;
    std::vector<float> values;
    std::vector<uint8_t> bytes_ggml;
};

// `as` a repacked type: the same matrix in its layout (bytes_ggml keeps GGML's).
Weights make_weights(const Fixture& fx, int64_t N, DType as) {
    Weights w{fx.dt, N, 2 * fx.cols, {}, {}, {}};
    for (int64_t n = 0; n < N; ++n) {
        for (const int64_t r : {n % fx.rows, (7 * n + 3) % fx.rows}) {
            const auto* src = fx.blocks.data() + static_cast<size_t>(r) * fx.row_bytes;
            w.bytes.insert(w.bytes.end(), src, src + fx.row_bytes);
            const auto* v = fx.values.data() + r * fx.cols;
            w.values.insert(w.values.end(), v, v + fx.cols);
        }
    }
    w.bytes_ggml = w.bytes;
    if (as != fx.dt) {
        repack_r16(fx.dt, w.bytes_ggml.data(), w.bytes.data(), N, w.K);
        w.dt = as;
    }
    return w;
}
Weights make_weights(const Fixture& fx, int64_t N) { return make_weights(fx, N, fx.dt); }

// |m part| of element k of weight row `row` (bytes of K elements): the additive part of its value (the block's
// m for Q4_1/Q5_1, dmin * min_j for Q4_K/Q5_K), 0 for the other types. Its value is d*q + m, so the
// magnitude of the parts the kernel multiplies separately is at most |w| + 2|m|.
double min_part(DType dt, const uint8_t* row, int64_t k) {
    const size_t bb = dtype_block_bytes(dt);
    const uint8_t* b = row + static_cast<size_t>(k / dtype_block_elems(dt)) * bb;
    if (dt == DType::Q4_1 || dt == DType::Q5_1) return std::fabs(decode_f16(b + 2));
    if (dt != DType::Q4_K && dt != DType::Q5_K) return 0.0;
    const int j = static_cast<int>(k % 256) / 32;
    const uint8_t* s = b + 4;
    const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    return std::fabs(decode_f16(b + 2)) * m;
}

std::vector<float> make_activations(int64_t T, int64_t K, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::vector<float> x(static_cast<size_t>(T * K));
    for (int64_t t = 0; t < T; ++t) {
        const float scale = t == 1 ? 0.0f : t == 2 ? 1000.0f : t == 3 ? 1e-3f : 1.0f;
        for (int64_t k = 0; k < K; ++k) x[t * K + k] = nd(rng) * scale;
        if (t == 4)
            for (int64_t k = 0; k < K; k += 37) x[t * K + k] *= 100.0f;  // outliers in some blocks
    }
    return x;
}

std::vector<float> run_quant(Isa isa, const std::vector<float>& x, int64_t T, const Weights& w, const float* bias,
                             int64_t n0, int64_t n1) {
    std::vector<float> y(static_cast<size_t>(T * w.N), -1.0f);
    std::vector<uint8_t> act(cpu::matmul_quant_act_bytes(w.dt, T, w.K));
    cpu::kernels_for(isa).quant->matmul(x.data(), T, w.K, w.bytes.data(), w.dt, bias, y.data(), w.N, n0, n1,
                                        act.data(), cpu::QuantOrder::VecDot);
    return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

TEST(QuantDequant, EveryTypeMatchesGgufBitForBit) {
    for (DType dt : kQuantTypes) {
        SCOPED_TRACE(type_name(dt));
        const Fixture fx = load_fixture(dt);
        std::vector<float> got(static_cast<size_t>(fx.cols));
        for (int64_t r = 0; r < fx.rows; ++r) {
            cpu::row_to_f32(fx.blocks.data() + static_cast<size_t>(r) * fx.row_bytes, dt, fx.cols, got.data());
            ASSERT_EQ(std::memcmp(got.data(), fx.values.data() + r * fx.cols, 4 * got.size()), 0) << "row " << r;
        }
    }
}

TEST(QuantDequant, RejectsPartialBlocksAndPlainTypesInQuantEntryPoints) {
    std::vector<uint8_t> blk(256, 0);
    std::vector<float> out(64);
    EXPECT_THROW(cpu::row_to_f32(blk.data(), DType::Q4_0, 48, out.data()), std::invalid_argument);
    EXPECT_THROW(cpu::matmul_quant_act_bytes(DType::Q4_K, 1, 128), std::invalid_argument);
    EXPECT_THROW(cpu::matmul_quant_act_bytes(DType::BF16, 1, 128), std::invalid_argument);
    EXPECT_THROW(cpu::matmul(out.data(), 1, 32, blk.data(), DType::Q8_0, nullptr, out.data(), 1, 0, 1),
                 std::invalid_argument);
}

// y = sum_k x_k w_k with x quantized per block: x_hat = dx * q, dx = fl(max|x| / 127), |x_hat - x| <= dx/2 up to
// the rounding of x * (127/max|x|) (relative 2^-23 of at most 127 units: below 1e-4 of dx/2), plus, for the
// 32-element types, ggml's f16 rounding of dx times |q| <= 127 (at most 2^-11 dx, or 2^-25 where dx is an f16
// subnormal); Q4_1 and Q5_1 take their m term from s = f16(dx * sum q), off by at most twice that per
// element, times |m|. The float work rounds each block term a few times and the sum once per block, on magnitudes of
// at most sum |x_hat| (|w| + 2|m|);
// gguf's own value of w is within 3 roundings of the exact d*q + m the kernel uses.
TEST(QuantMatmul, WithinTheActivationQuantizationBoundOfExactMath) {
    constexpr int64_t T = 6, N = 37;  // two groups of repacked rows and 5 rows past them
    for (DType dt : kAllMatmulTypes) {
        const Weights w = make_weights(load_fixture(dt), N, dt);
        const int64_t K = w.K, be = dtype_block_elems(dt), nb = K / be;
        const auto x = make_activations(T, K, 11);
        std::vector<float> bias(N);
        for (int64_t n = 0; n < N; ++n) bias[n] = 0.25f * static_cast<float>(n % 5) - 0.5f;
        for (Isa isa : runnable_isas()) {
            SCOPED_TRACE(type_name(dt) + " " + cpu::isa_name(isa));
            const auto y = run_quant(isa, x, T, w, bias.data(), 0, N);
            for (int64_t t = 0; t < T; ++t) {
                std::vector<double> dx(static_cast<size_t>(nb));
                for (int64_t b = 0; b < nb; ++b) {
                    float amax = 0.0f;
                    for (int64_t i = 0; i < be; ++i) amax = std::max(amax, std::fabs(x[t * K + b * be + i]));
                    dx[b] = amax / 127.0f;
                }
                for (int64_t n = 0; n < N; ++n) {
                    const uint8_t* row = w.bytes_ggml.data() + static_cast<size_t>(n) * dtype_row_bytes(dt, K);
                    double exact = bias[n], quant_err = 0, mag = std::fabs(bias[n]);
                    for (int64_t k = 0; k < K; ++k) {
                        const double xv = x[t * K + k], wv = w.values[n * K + k], d = dx[k / be];
                        exact += xv * wv;
                        const double e16 = be == 32 ? 127 * std::max(std::ldexp(d, -11), std::ldexp(1.0, -25)) : 0;
                        quant_err += (0.5 * (1 + 1e-4) * d + e16) * std::fabs(wv) + 2 * e16 * min_part(dtype_unpacked(dt), row, k);
                        mag += (std::fabs(xv) + d) * (std::fabs(wv) + 2 * min_part(dtype_unpacked(dt), row, k));
                    }
                    const double bound = quant_err + static_cast<double>(nb + 10) * std::ldexp(1.0, -24) * mag;
                    ASSERT_LE(std::fabs(y[t * N + n] - exact), bound) << "t " << t << " n " << n;
                }
            }
        }
    }
}

// Every Isa the CPU has (AVX2; AVX-512 with VNNI) against the portable kernel, for every token count from 1 to 33
// (every tile of the SIMD kernels, and every remainder after tiles of 8 and 4 tokens) and 19 rows (no multiple of
// a tile of rows or of a group of them; repacked: 37, two groups of 16 and rows past them).
TEST(QuantMatmul, EveryIsaAgreesWithPortableBitForBit) {
    if (static_cast<int>(cpu::best_isa()) < static_cast<int>(Isa::Avx2)) GTEST_SKIP() << "no AVX2";
    for (DType dt : kAllMatmulTypes) {
        const Weights w = make_weights(load_fixture(dt), dtype_is_repacked(dt) ? 37 : 19, dt);
        const std::vector<float> bias(static_cast<size_t>(w.N), 0.125f);
        for (int64_t T = 1; T <= 33; ++T) {
            const auto x = make_activations(T, w.K, 5 + static_cast<uint32_t>(T));
            const auto want = run_quant(Isa::Portable, x, T, w, nullptr, 0, w.N);
            const auto want_bias = run_quant(Isa::Portable, x, T, w, bias.data(), 0, w.N);
            for (const Isa isa : {Isa::Avx2, Isa::AvxVnni, Isa::Avx512}) {
                if (!cpu::can_run(isa)) continue;
                SCOPED_TRACE(type_name(dt) + " T " + std::to_string(T) + " " + cpu::isa_name(isa));
                EXPECT_TRUE(same_bits(want, run_quant(isa, x, T, w, nullptr, 0, w.N)));
                EXPECT_TRUE(same_bits(want_bias, run_quant(isa, x, T, w, bias.data(), 0, w.N)));
            }
        }
    }
}

// The largest integer sums a block can hold: every quant at its top (all bits set) against activations that all
// quantize to +127 or to -127. The AVX2 kernels add vpmaddubsw's 16-bit pair sums for as long as no total can
// overflow; a run one product too long would wrap here and part from the portable kernel's 32-bit sums.
TEST(QuantMatmul, EveryIsaAgreesWithPortableAtTheLargestSums) {
    if (static_cast<int>(cpu::best_isa()) < static_cast<int>(Isa::Avx2)) GTEST_SKIP() << "no AVX2";
    constexpr int64_t N = 37, K = 512;
    for (DType dt : kAllMatmulTypes) {
        const DType g = dtype_unpacked(dt);
        const size_t bb = dtype_block_bytes(g);
        // All bits set, then the f16 scales (d, and m or dmin where the type has one) at 1.0.
        std::vector<uint8_t> ggml(dtype_row_bytes(g, K) * N, 0xFF);
        for (size_t at = 0; at < ggml.size(); at += bb) {
            const size_t d = g == DType::Q6_K ? 208 : 0;
            ggml[at + d] = 0x00;
            ggml[at + d + 1] = 0x3C;
            if (g == DType::Q4_1 || g == DType::Q5_1 || g == DType::Q4_K || g == DType::Q5_K) {
                ggml[at + 2] = 0x00;
                ggml[at + 3] = 0x3C;
            }
        }
        Weights w{dt, N, K, ggml, {}, ggml};
        if (dt != g) repack_r16(g, ggml.data(), w.bytes.data(), N, K);
        for (const float sign : {1.0f, -1.0f}) {
            for (const int64_t T : {1, 2, 4, 8}) {
                const std::vector<float> x(static_cast<size_t>(T * K), sign);
                const auto want = run_quant(Isa::Portable, x, T, w, nullptr, 0, N);
                for (const Isa isa : {Isa::Avx2, Isa::AvxVnni, Isa::Avx512}) {
                    if (!cpu::can_run(isa)) continue;
                    SCOPED_TRACE(type_name(dt) + " T " + std::to_string(T) + " x " + std::to_string(sign) + " " +
                                 cpu::isa_name(isa));
                    EXPECT_TRUE(same_bits(want, run_quant(isa, x, T, w, nullptr, 0, N)));
                }
            }
        }
    }
}

// Every output must be the same whether computed in one call, in ranges split at odd rows, or one token at a
// time: what makes a replayed step (T = 1) and a batched one agree, and any thread split give the same bits.
TEST(QuantMatmul, IndependentOfRowRangeAndBatchSize) {
    constexpr int64_t T = 15, N = 45;  // tiles of 8, 4 and 3 tokens; cuts inside groups of repacked rows
    for (DType dt : kAllMatmulTypes) {
        const Weights w = make_weights(load_fixture(dt), N, dt);
        const auto x = make_activations(T, w.K, 3);
        for (Isa isa : runnable_isas()) {
            SCOPED_TRACE(type_name(dt) + " " + cpu::isa_name(isa));
            const auto whole = run_quant(isa, x, T, w, nullptr, 0, N);
            std::vector<float> split(static_cast<size_t>(T * N));
            const int64_t cuts[] = {0, 3, 4, 13, 21, N};
            for (int i = 0; i + 1 < 6; ++i) {
                const auto part = run_quant(isa, x, T, w, nullptr, cuts[i], cuts[i + 1]);
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t n = cuts[i]; n < cuts[i + 1]; ++n) split[t * N + n] = part[t * N + n];
            }
            EXPECT_TRUE(same_bits(whole, split));
            // One quantization serving every range (as the CPU backend's threads reuse theirs across the row chunks
            // they claim, and across q/k/v), the ranges in reverse order: quantize leaves act as product needs it,
            // and product does not change it.
            const cpu::QuantKernels& qk = *cpu::kernels_for(isa).quant;
            std::vector<uint8_t> act(cpu::matmul_quant_act_bytes(w.dt, T, w.K));
            qk.quantize(x.data(), T, w.K, w.dt, act.data());
            std::vector<float> shared(static_cast<size_t>(T * N), -1.0f);
            for (int i = 4; i >= 0; --i)
                qk.product(act.data(), T, w.K, w.bytes.data(), w.dt, nullptr, shared.data(), N, cuts[i], cuts[i + 1],
                           cpu::QuantOrder::VecDot);
            EXPECT_TRUE(same_bits(whole, shared));
            std::vector<float> rows(static_cast<size_t>(T * N));
            for (int64_t t = 0; t < T; ++t) {
                const std::vector<float> xt(x.begin() + t * w.K, x.begin() + (t + 1) * w.K);
                const auto one = run_quant(isa, xt, 1, w, nullptr, 0, N);
                std::copy(one.begin(), one.end(), rows.begin() + t * N);
            }
            EXPECT_TRUE(same_bits(whole, rows));
        }
    }
}

// ggml's quantize_row_q8_0 / q8_1 of one block, written here from its definition: q, f16 d and (Q8_1) f16 s.
struct RefAct {
    int q[32];
    float d, s;
};
RefAct ref_quantize(const float* x) {
    RefAct a{};
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += a.q[i] = static_cast<int>(std::nearbyint(x[i] * id));
    a.d = f16_to_f32(f32_to_f16(d));
    a.s = f16_to_f32(f32_to_f16(d * static_cast<float>(sum)));
    return a;
}

// The integer weights of a GGML block of a 32-element type (ggml-common.h), offsets applied.
void ref_ints(DType dt, const uint8_t* b, int* q) {
    if (dt == DType::Q8_0) {
        for (int i = 0; i < 32; ++i) q[i] = static_cast<int8_t>(b[2 + i]);
        return;
    }
    const bool has_m = dt == DType::Q4_1 || dt == DType::Q5_1, five = dt == DType::Q5_0 || dt == DType::Q5_1;
    const uint8_t* qs = b + dtype_block_bytes(dt) - 16;
    uint32_t qh = 0;
    if (five) std::memcpy(&qh, b + (has_m ? 4 : 2), 4);
    const int offset = has_m ? 0 : five ? 16 : 8;
    for (int i = 0; i < 16; ++i) {
        q[i] = (qs[i] & 15) + static_cast<int>(((qh >> i) & 1) << 4) - offset;
        q[i + 16] = (qs[i] >> 4) + static_cast<int>(((qh >> (i + 16)) & 1) << 4) - offset;
    }
}

// ggml's quantize_row_q8_K of one block of 256, from its definition (quant.h): q, d and the sums of 16.
struct RefActK {
    int q[256], bsums[16];
    float d;
};
RefActK ref_quantize_k(const float* x) {
    RefActK a{};
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 256; ++i)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    if (amax == 0.0f) return a;
    const float iscale = -127.0f / max;
    for (int i = 0; i < 256; ++i) {
        a.q[i] = std::min(127, static_cast<int>(std::nearbyint(iscale * x[i])));
        a.bsums[i / 16] += a.q[i];
    }
    a.d = 1.0f / iscale;
    return a;
}

// The fast order of Q4_K/Q5_K/Q6_K (quant.h) for one GGML block against one Q8_K block, into acc.
float ref_fast_k(DType dt, const uint8_t* b, const RefActK& a, float acc) {
    if (dt == DType::Q6_K) {  // ggml-common.h: two halves of 128, ql[128] qh[64] scales[16] d
        int isum = 0;
        for (int s = 0; s < 16; ++s) {
            int dot = -32 * a.bsums[s];
            for (int e = 16 * s; e < 16 * s + 16; ++e) {
                const int n = e / 128, l = e % 32, c = e % 128 / 32;
                const uint8_t lo = b[64 * n + 32 * (c % 2) + l];
                dot += ((c < 2 ? lo & 15 : lo >> 4) | ((b[128 + 32 * n + l] >> (2 * c)) & 3) << 4) * a.q[e];
            }
            isum += static_cast<int8_t>(b[192 + s]) * dot;
        }
        return std::fma(static_cast<float>(isum), static_cast<float>(decode_f16(b + 208)) * a.d, acc);
    }
    const uint8_t* s = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (dt == DType::Q5_K ? 48 : 16);
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
        const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        int dot = 0;
        for (int l = 0; l < 32; ++l) {
            const uint8_t byte = qs[32 * (j / 2) + l];
            const int hi = dt == DType::Q5_K ? ((qh[l] >> j) & 1) << 4 : 0;
            dot += ((j % 2 == 0 ? byte & 15 : byte >> 4) | hi) * a.q[32 * j + l];
        }
        isum += sc * dot;
        msum += m * (a.bsums[2 * j] + a.bsums[2 * j + 1]);
    }
    acc = std::fma(static_cast<float>(isum), static_cast<float>(decode_f16(b)) * a.d, acc);
    return std::fma(-static_cast<float>(msum), static_cast<float>(decode_f16(b + 2)) * a.d, acc);
}

// The fast numerics (quant.h) on every ISA the CPU has, with the weights repacked, equal bit for bit the fast
// order computed here on GGML's blocks: token counts from 1 to 33 (every tile and remainder), 37 rows (two groups
// and rows past them), with and without a bias.
TEST(QuantFast, RepackedMatmulEqualsTheFastOrderOnGgmlBlocks) {
    constexpr int64_t N = 37;
    for (DType dt : kRepackedTypes) {
        const DType gt = dtype_unpacked(dt);
        const bool has_m = gt == DType::Q4_1 || gt == DType::Q5_1, k = dtype_block_elems(gt) == 256;
        const Weights w = make_weights(load_fixture(dt), N, dt);
        const int64_t nb = w.K / dtype_block_elems(gt);
        std::vector<float> bias(N);
        for (int64_t n = 0; n < N; ++n) bias[n] = 0.375f * static_cast<float>(n % 7) - 1.0f;
        for (const int64_t T : {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 33}) {
            const auto x = make_activations(T, w.K, 21 + static_cast<uint32_t>(T));
            std::vector<float> want(static_cast<size_t>(T * N));
            for (int64_t t = 0; t < T; ++t)
                for (int64_t n = 0; n < N; ++n) {
                    float acc = 0.0f, macc = 0.0f;
                    for (int64_t b = 0; b < nb; ++b) {
                        const uint8_t* blk = w.bytes_ggml.data() + (n * nb + b) * dtype_block_bytes(gt);
                        if (k) {
                            acc = ref_fast_k(gt, blk, ref_quantize_k(x.data() + t * w.K + 256 * b), acc);
                            continue;
                        }
                        const RefAct a = ref_quantize(x.data() + t * w.K + 32 * b);
                        int q[32], isum = 0;
                        ref_ints(gt, blk, q);
                        for (int i = 0; i < 32; ++i) isum += q[i] * a.q[i];
                        acc = std::fma(static_cast<float>(isum), static_cast<float>(decode_f16(blk)) * a.d, acc);
                        if (has_m) macc = std::fma(static_cast<float>(decode_f16(blk + 2)), a.s, macc);
                    }
                    want[t * N + n] = (has_m ? acc + macc : acc) + bias[n];
                }
            for (Isa isa : runnable_isas()) {
                SCOPED_TRACE(type_name(dt) + " T " + std::to_string(T) + " " + cpu::isa_name(isa));
                EXPECT_TRUE(same_bits(run_quant(isa, x, T, w, bias.data(), 0, N), want));
            }
        }
    }
}

TEST(QuantFast, RepackRefusesTypesWithoutARepackedFormAndPartialBlocks) {
    std::vector<uint8_t> in(dtype_row_bytes(DType::Q6_K, 256) * 16), out(in.size());
    for (DType dt : {DType::F16, DType::BF16, DType::Q8_0_R16, DType::Q6_K_R16})
        EXPECT_THROW(repack_r16(dt, in.data(), out.data(), 16, 256), std::invalid_argument) << type_name(dt);
    EXPECT_THROW(repack_r16(DType::Q8_0, in.data(), out.data(), 16, 48), std::invalid_argument);
}

// testdata/quant/ggml_dot_<type>.bin (scripts/make_ggml_dot_fixtures.py): weight rows quantized by ggml,
// activation rows, ggml's quantization of them (its vec_dot_type's from_float) and ggml's vec_dot of every pair,
// from an x86 AVX2 build of ggml-cpu (format in the script).
struct GgmlDot {
    DType dt;
    uint32_t act_type = 0;
    int64_t R = 0, A = 0, K = 0;
    std::vector<uint8_t> weights, act_blocks;
    std::vector<float> x, dots;
};

size_t ggml_act_block_bytes(uint32_t act_type) { return act_type == 8 ? 34 : act_type == 9 ? 36 : 292; }

GgmlDot load_ggml_dot(DType dt) {
    const std::string path = testing::repo_path("testdata/quant/ggml_dot_" + type_name(dt) + ".bin");
    const std::vector<uint8_t> bytes = read_fixture(path, "TLGD", 28);
    uint32_t hdr[6];
    std::memcpy(hdr, bytes.data() + 4, sizeof(hdr));
    GgmlDot g{dt, hdr[2], hdr[3], hdr[4], hdr[5], {}, {}, {}, {}};
    const uint32_t want_act = dtype_block_elems(dt) == 256 ? 15 : (dt == DType::Q4_1 || dt == DType::Q5_1) ? 9 : 8;
    if (hdr[0] != 1 || hdr[1] != ggml_type_id(dt) || g.act_type != want_act || !dtype_row_ok(dt, g.K))
        throw std::runtime_error("fixture " + path + " does not match its header");
    const size_t nw = dtype_row_bytes(dt, g.K) * static_cast<size_t>(g.R), nx = static_cast<size_t>(g.A * g.K);
    const size_t na = nx / static_cast<size_t>(dtype_block_elems(dt)) * ggml_act_block_bytes(g.act_type);
    const size_t nd = static_cast<size_t>(g.A * g.R);
    if (bytes.size() != 28 + nw + 4 * nx + na + 4 * nd) throw std::runtime_error("fixture " + path + " has a bad size");
    const uint8_t* p = bytes.data() + 28;
    g.weights.assign(p, p + nw);
    g.x.resize(nx);
    std::memcpy(g.x.data(), p + nw, 4 * nx);
    g.act_blocks.assign(p + nw + 4 * nx, p + nw + 4 * nx + na);
    g.dots.resize(nd);
    std::memcpy(g.dots.data(), p + nw + 4 * nx + na, 4 * nd);
    return g;
}


// The fixture's rows through one ISA's quantized matmul, all tokens in one call; also returns the activation blocks.
void run_ggml_dot_matmul(const GgmlDot& g, DType dt, Isa isa, std::vector<float>& y, std::vector<uint8_t>& act) {
    y.assign(static_cast<size_t>(g.A * g.R), 0.0f);
    act.assign(cpu::matmul_quant_act_bytes(dt, g.A, g.K), 0);
    cpu::kernels_for(isa).quant->matmul(g.x.data(), g.A, g.K, g.weights.data(), dt, nullptr, y.data(), g.R, 0, g.R,
                                        act.data(), cpu::QuantOrder::VecDot);
}

// tracelm's activation blocks (quant.h) are ggml's field for field: scales as the f32 of ggml's f16 (Q8_0,
// Q8_1) or f32 (Q8_K), the same int8 values and sums.
TEST(GgmlDot, ActivationQuantizationEqualsGgml) {
    for (DType dt : kQuantTypes) {
        const GgmlDot g = load_ggml_dot(dt);
        const int64_t be = dtype_block_elems(dt), blocks = g.A * g.K / be;
        const size_t gb = ggml_act_block_bytes(g.act_type);
        for (Isa isa : runnable_isas()) {
            SCOPED_TRACE(type_name(dt) + " " + cpu::isa_name(isa));
            std::vector<float> y;
            std::vector<uint8_t> act;
            run_ggml_dot_matmul(g, dt, isa, y, act);
            for (int64_t i = 0; i < blocks; ++i) {
                const uint8_t* ref = g.act_blocks.data() + static_cast<size_t>(i) * gb;
                SCOPED_TRACE("block " + std::to_string(i));
                if (be == 32) {
                    const auto& a = reinterpret_cast<const cpu::quant::ActBlock32*>(act.data())[i];
                    const float d = static_cast<float>(decode_f16(ref));
                    EXPECT_EQ(std::memcmp(&a.d, &d, 4), 0) << a.d << " vs " << d;
                    const size_t qs = g.act_type == 9 ? 4 : 2;
                    if (g.act_type == 9) {
                        const float s = static_cast<float>(decode_f16(ref + 2));
                        EXPECT_EQ(std::memcmp(&a.s, &s, 4), 0) << a.s << " vs " << s;
                    }
                    EXPECT_EQ(std::memcmp(a.q, ref + qs, 32), 0);
                } else {
                    const auto& a = reinterpret_cast<const cpu::quant::ActBlock256*>(act.data())[i];
                    EXPECT_EQ(std::memcmp(&a.d, ref, 4), 0);
                    EXPECT_EQ(std::memcmp(a.q, ref + 4, 256), 0);
                    EXPECT_EQ(std::memcmp(a.bsums, ref + 260, 32), 0);
                }
            }
        }
    }
}

// Every output equals ggml's vec_dot bit for bit, in one call over all tokens, over the first T tokens for every
// T (so the SIMD kernels' tiles of 1 to 8 tokens run) and one token at a time (the decode tiles).
TEST(GgmlDot, MatmulEqualsGgmlVecDot) {
    for (DType dt : kQuantTypes) {
        const GgmlDot g = load_ggml_dot(dt);
        for (Isa isa : runnable_isas()) {
            SCOPED_TRACE(type_name(dt) + " " + cpu::isa_name(isa));
            std::vector<float> y;
            std::vector<uint8_t> act;
            run_ggml_dot_matmul(g, dt, isa, y, act);
            for (int64_t i = 0; i < g.A * g.R; ++i)
                EXPECT_EQ(std::memcmp(&y[i], &g.dots[i], 4), 0)
                    << "act " << i / g.R << " row " << i % g.R << ": " << y[i] << " vs ggml " << g.dots[i];
            for (int64_t T = 2; T < g.A; ++T) {
                std::vector<float> yt(static_cast<size_t>(T * g.R));
                cpu::kernels_for(isa).quant->matmul(g.x.data(), T, g.K, g.weights.data(), dt, nullptr, yt.data(), g.R,
                                                    0, g.R, act.data(), cpu::QuantOrder::VecDot);
                EXPECT_EQ(std::memcmp(yt.data(), g.dots.data(), 4 * yt.size()), 0) << "the first " << T << " tokens";
            }
            for (int64_t a = 0; a < g.A; ++a) {
                std::vector<float> y1(static_cast<size_t>(g.R));
                cpu::kernels_for(isa).quant->matmul(g.x.data() + a * g.K, 1, g.K, g.weights.data(), dt, nullptr,
                                                    y1.data(), g.R, 0, g.R, act.data(),
                                                    cpu::QuantOrder::VecDot);
                EXPECT_EQ(std::memcmp(y1.data(), g.dots.data() + a * g.R, 4 * y1.size()), 0) << "act " << a << ", T = 1";
            }
        }
    }
}

// ggml's vec_dot in tiles of every shape: 33 tokens cycling through the fixture's activation rows against 19
// weight rows cycling through its weight rows, so that tiles of 8 tokens, of 4 and of 1, and row counts that are
// no multiple of a tile of rows, all meet ggml's own dot products.
TEST(GgmlDot, TiledMatmulEqualsGgmlVecDot) {
    constexpr int64_t T = 33, N = 19;
    for (DType dt : kQuantTypes) {
        const GgmlDot g = load_ggml_dot(dt);
        const size_t row = dtype_row_bytes(dt, g.K);
        std::vector<uint8_t> w;
        for (int64_t n = 0; n < N; ++n) {
            const auto* src = g.weights.data() + static_cast<size_t>(n % g.R) * row;
            w.insert(w.end(), src, src + row);
        }
        std::vector<float> x;
        for (int64_t t = 0; t < T; ++t) {
            const auto src = g.x.begin() + (t % g.A) * g.K;
            x.insert(x.end(), src, src + g.K);
        }
        for (Isa isa : runnable_isas()) {
            SCOPED_TRACE(type_name(dt) + " " + cpu::isa_name(isa));
            std::vector<float> y(static_cast<size_t>(T * N));
            std::vector<uint8_t> act(cpu::matmul_quant_act_bytes(dt, T, g.K));
            cpu::kernels_for(isa).quant->matmul(x.data(), T, g.K, w.data(), dt, nullptr, y.data(), N, 0, N, act.data(),
                                                cpu::QuantOrder::VecDot);
            for (int64_t t = 0; t < T; ++t)
                for (int64_t n = 0; n < N; ++n)
                    EXPECT_EQ(std::memcmp(&y[t * N + n], &g.dots[(t % g.A) * g.R + n % g.R], 4), 0)
                        << "token " << t << " row " << n;
        }
    }
}

// testdata/quant/ggml_mul_mat_<type>.bin (scripts/make_ggml_dot_fixtures.py): ggml's whole MUL_MAT of the
// ggml_dot fixture's weight rows by several of its activation rows at once (7, 8 and 17 rows), computed by ggml-cpu
// as llama.cpp's forward computes a batch: its kernel chosen by the product's rows.
struct GgmlMulMat {
    std::vector<std::vector<int64_t>> products;  // the activation rows of each product
    std::vector<std::vector<float>> y;           // each product's T x R outputs
};

GgmlMulMat load_ggml_mul_mat(DType dt, const GgmlDot& g) {
    const std::string path = testing::repo_path("testdata/quant/ggml_mul_mat_" + type_name(dt) + ".bin");
    const std::vector<uint8_t> bytes = read_fixture(path, "TLGM", 24);
    uint32_t hdr[5];
    std::memcpy(hdr, bytes.data() + 4, sizeof(hdr));
    if (hdr[0] != 1 || hdr[1] != ggml_type_id(dt) || hdr[2] != g.R || hdr[3] != g.K)
        throw std::runtime_error("fixture " + path + " does not match its header or the ggml_dot fixture");
    GgmlMulMat m;
    size_t at = 24;
    const auto u32 = [&] {
        if (at + 4 > bytes.size()) throw std::runtime_error("fixture " + path + " is truncated");
        uint32_t v;
        std::memcpy(&v, bytes.data() + at, 4);
        at += 4;
        return v;
    };
    for (uint32_t p = 0; p < hdr[4]; ++p) {
        std::vector<int64_t> rows(u32());
        for (int64_t& r : rows) {
            r = u32();
            if (r >= g.A) throw std::runtime_error("fixture " + path + " names a row past the ggml_dot fixture's");
        }
        m.products.push_back(rows);
    }
    for (const auto& rows : m.products) {
        std::vector<float> y(rows.size() * static_cast<size_t>(g.R));
        if (at + 4 * y.size() > bytes.size()) throw std::runtime_error("fixture " + path + " is truncated");
        std::memcpy(y.data(), bytes.data() + at, 4 * y.size());
        at += 4 * y.size();
        m.y.push_back(y);
    }
    if (at != bytes.size()) throw std::runtime_error("fixture " + path + " has a bad size");
    return m;
}

// ggml's choice of order by the product's rows: the tiled kernel for the K types from 8 rows, one order otherwise.
TEST(GgmlMulMat, OrderFollowsTheProductsRowsAsInGgml) {
    for (DType dt : kQuantTypes) {
        const bool k_type = dtype_block_elems(dt) == 256;
        for (int64_t rows : {1, 2, 7}) EXPECT_EQ(cpu::ggml_quant_order(dt, rows), cpu::QuantOrder::VecDot);
        for (int64_t rows : {8, 9, 512})
            EXPECT_EQ(cpu::ggml_quant_order(dt, rows), k_type ? cpu::QuantOrder::Tiled : cpu::QuantOrder::VecDot);
    }
    EXPECT_EQ(kGgmlTiledMinRows, 8);
    for (DType dt : kRepackedTypes) EXPECT_EQ(cpu::ggml_quant_order(dt, 512), cpu::QuantOrder::VecDot);
}

// Every product of the fixture through every ISA's kernel, in the order ggml_quant_order gives for its rows, equals
// ggml's MUL_MAT bit for bit: below 8 rows and for the 32-element types (llamafile's tinyBLAS from 2 rows) ggml's
// vec_dot, from 8 rows of a K type its tiled kernel, whose sums differ from vec_dot's.
TEST(GgmlMulMat, ProductsOfSeveralRowsEqualGgml) {
    for (DType dt : kQuantTypes) {
        const GgmlDot g = load_ggml_dot(dt);
        const GgmlMulMat m = load_ggml_mul_mat(dt, g);
        ASSERT_EQ(m.products.size(), 3u);
        size_t differ_from_vec_dot = 0;
        for (size_t p = 0; p < m.products.size(); ++p) {
            const auto& rows = m.products[p];
            const auto T = static_cast<int64_t>(rows.size());
            std::vector<float> x;
            for (int64_t r : rows) x.insert(x.end(), g.x.begin() + r * g.K, g.x.begin() + (r + 1) * g.K);
            for (int64_t t = 0; t < T; ++t)
                differ_from_vec_dot += std::memcmp(m.y[p].data() + t * g.R, g.dots.data() + rows[t] * g.R, 4 * g.R) != 0;
            for (Isa isa : runnable_isas()) {
                SCOPED_TRACE(type_name(dt) + " " + cpu::isa_name(isa) + ", a product of " + std::to_string(T) + " rows");
                std::vector<float> y(static_cast<size_t>(T * g.R));
                std::vector<uint8_t> act(cpu::matmul_quant_act_bytes(dt, T, g.K));
                cpu::kernels_for(isa).quant->matmul(x.data(), T, g.K, g.weights.data(), dt, nullptr, y.data(), g.R, 0,
                                                    g.R, act.data(), cpu::ggml_quant_order(dt, T));
                for (int64_t i = 0; i < T * g.R; ++i)
                    EXPECT_EQ(std::memcmp(&y[i], &m.y[p][i], 4), 0)
                        << "row " << i / g.R << " weight row " << i % g.R << ": " << y[i] << " vs ggml " << m.y[p][i];
            }
        }
        // The fixture tells the orders apart (the tiled products differ from vec_dot on some outputs).
        EXPECT_EQ(differ_from_vec_dot > 0, dtype_block_elems(dt) == 256) << type_name(dt);
    }
}

// The tiled order in tracelm's tiles of every shape, and over any split of the rows and tokens: 33 tokens cycling
// through the fixture's activation rows against 19 weight rows cycling through its weight rows, all of them, the
// first T for every T, one token at a time and in ranges of rows, equal ggml's 8-row product (whose outputs are
// ggml's tiled order for each pair).
TEST(GgmlMulMat, TiledOrderInTilesOfEveryShapeEqualsGgml) {
    constexpr int64_t T = 33, N = 19;
    for (DType dt : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        const GgmlDot g = load_ggml_dot(dt);
        const GgmlMulMat m = load_ggml_mul_mat(dt, g);
        ASSERT_EQ(m.products[1].size(), 8u);  // rows 0..7: every activation row in the tiled order
        const std::vector<float>& ref = m.y[1];
        const size_t row = dtype_row_bytes(dt, g.K);
        std::vector<uint8_t> w;
        for (int64_t n = 0; n < N; ++n) {
            const auto* src = g.weights.data() + static_cast<size_t>(n % g.R) * row;
            w.insert(w.end(), src, src + row);
        }
        std::vector<float> x;
        for (int64_t t = 0; t < T; ++t) {
            const auto src = g.x.begin() + (t % g.A) * g.K;
            x.insert(x.end(), src, src + g.K);
        }
        const auto want = [&](int64_t t, int64_t n) { return &ref[(t % g.A) * g.R + n % g.R]; };
        for (Isa isa : runnable_isas()) {
            SCOPED_TRACE(type_name(dt) + " " + cpu::isa_name(isa));
            const auto run = [&](int64_t t0, int64_t tn, int64_t n0, int64_t n1) {
                std::vector<float> y(static_cast<size_t>(tn * N), -1.0f);
                std::vector<uint8_t> act(cpu::matmul_quant_act_bytes(dt, tn, g.K));
                cpu::kernels_for(isa).quant->matmul(x.data() + t0 * g.K, tn, g.K, w.data(), dt, nullptr, y.data(), N,
                                                    n0, n1, act.data(), cpu::QuantOrder::Tiled);
                for (int64_t t = 0; t < tn; ++t)
                    for (int64_t n = n0; n < n1; ++n)
                        EXPECT_EQ(std::memcmp(&y[t * N + n], want(t0 + t, n), 4), 0)
                            << "token " << t0 + t << " row " << n << " (tokens " << t0 << "+" << tn << ", rows " << n0
                            << ".." << n1 << ")";
            };
            run(0, T, 0, N);
            for (int64_t tn = 1; tn < 10; ++tn) run(0, tn, 0, N);
            for (int64_t t = 0; t < T; t += 5) run(t, 1, 0, N);
            run(3, 13, 5, 11);
        }
    }
}

class QuantBackend : public testing::BackendTest {
   protected:
    QuantBackend() : BackendTest(7) {}

    Tensor weights(const std::string& name, const Weights& w) {
        Tensor t = whole(be.alloc(w.bytes.size(), name), w.dt, w.N, w.K);
        be.upload(t, w.bytes.data());
        return t;
    }
};

TEST_F(QuantBackend, EmbeddingDequantizesRowsOfAQuantizedTable) {
    const Weights table = make_weights(load_fixture(DType::Q8_0), 12);
    const Tensor tab = weights("tok_embd", table);
    const Tensor out = f32("emb", 4, table.K, std::vector<float>(4 * table.K, 1.0f));
    be.embedding(i32("ids", 1, 4, {5, 0, 11, 12}), tab, 1.0f, out);
    const auto got = get<float>(out);
    for (int64_t t = 0; t < 3; ++t) {
        const int64_t id = std::vector<int64_t>{5, 0, 11}[t];
        EXPECT_EQ(std::memcmp(got.data() + t * table.K, table.values.data() + id * table.K, 4 * table.K), 0);
    }
    for (int64_t k = 0; k < table.K; ++k) ASSERT_EQ(got[3 * table.K + k], 0.0f);  // id out of range
}

TEST_F(QuantBackend, MatmulRejectsWeightsItCannotUse) {
    const Tensor x = f32("x", 1, 64, randn(64)), out = f32("out", 1, 2, {0, 0});
    const Tensor wi = i32("w_i32", 2, 64, std::vector<int32_t>(128));
    try {
        be.matmul(x, wi, nullptr, out);
        FAIL() << "i32 weights accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("has type i32, this backend runs f32, bf16, f16, q8_0"), std::string::npos) << e.what();
    }
}

// A repacked table's rows (in groups and past them) look up as the same table in GGML's layout does, bit for bit.
TEST_F(QuantBackend, EmbeddingOfARepackedTableEqualsTheGgmlTable) {
    for (DType dt : kRepackedTypes) {
        SCOPED_TRACE(type_name(dt));
        const Weights packed = make_weights(load_fixture(dt), 37, dt), ggml = make_weights(load_fixture(dt), 37);
        const Tensor ids = i32("ids", 1, 5, {0, 17, 31, 32, 36});
        const Tensor a = f32("a", 5, packed.K, std::vector<float>(5 * packed.K)),
                     b = f32("b", 5, packed.K, std::vector<float>(5 * packed.K));
        be.embedding(ids, weights("packed", packed), 1.0f, a);
        be.embedding(ids, weights("ggml", ggml), 1.0f, b);
        EXPECT_TRUE(same_bits(get<float>(a), get<float>(b)));
    }
}

// A captured step of quantized ops (Q8_0 embedding, Q4_1 and Q6_K matmuls with a bias, as a GGUF model runs
// them, and a repacked Q5_1 one, as the fast numerics run it) replays bit for bit like eager execution and like the kernel called directly, with no heap allocation.
TEST_F(QuantBackend, CapturedQuantizedMatmulEqualsEagerWithoutAllocating) {
    const Weights emb = make_weights(load_fixture(DType::Q8_0), 10);  // 10 x 1024
    const Weights w1 = make_weights(load_fixture(DType::Q4_1), 45);   // 45 x 1024
    const Weights w2 = make_weights(load_fixture(DType::Q6_K), 37);   // 37 x 1024
    const Weights w3 = make_weights(load_fixture(DType::Q5_1), 37, DType::Q5_1_R16);
    const Tensor temb = weights("emb", emb), tw1 = weights("w1", w1), tw2 = weights("w2", w2), tw3 = weights("w3", w3);
    std::vector<float> bias_v(45);
    for (auto& b : bias_v) b = std::normal_distribution<float>()(rng);
    const Tensor bias = f32("bias", 1, 45, bias_v);
    const Tensor ids = i32("ids", 1, 3, {4, 9, 1}), h = f32("h", 3, 1024, std::vector<float>(3 * 1024));
    const Tensor y1 = f32("y1", 3, 45, std::vector<float>(3 * 45)), y2 = f32("y2", 3, 37, std::vector<float>(3 * 37));
    const Tensor y3 = f32("y3", 3, 37, std::vector<float>(3 * 37));
    auto step = [&] {
        be.embedding(ids, temb, 1.0f, h);
        be.matmul(h, tw1, &bias, y1);
        be.matmul(h, tw2, nullptr, y2);
        be.matmul(h, tw3, nullptr, y3);
    };
    step();
    const auto e1 = get<float>(y1), e2 = get<float>(y2), e3 = get<float>(y3), hv = get<float>(h);
    // The same numbers from the kernel itself, one call over all rows.
    std::vector<float> d1(3 * 45), d2(3 * 37), d3(3 * 37);
    std::vector<uint8_t> act(std::max(cpu::matmul_quant_act_bytes(DType::Q6_K, 3, 1024),
                                      cpu::matmul_quant_act_bytes(DType::Q4_1, 3, 1024)));
    cpu::matmul_quant(hv.data(), 3, 1024, w1.bytes.data(), DType::Q4_1, bias_v.data(), d1.data(), 45, 0, 45,
                      act.data());
    cpu::matmul_quant(hv.data(), 3, 1024, w2.bytes.data(), DType::Q6_K, nullptr, d2.data(), 37, 0, 37, act.data());
    cpu::matmul_quant(hv.data(), 3, 1024, w3.bytes.data(), DType::Q5_1_R16, nullptr, d3.data(), 37, 0, 37, act.data());
    EXPECT_TRUE(same_bits(e1, d1));
    EXPECT_TRUE(same_bits(e2, d2));
    EXPECT_TRUE(same_bits(e3, d3));

    for (const Tensor& t : {h, y1, y2, y3}) be.upload(t, std::vector<float>(static_cast<size_t>(t.numel()), 0.0f).data());
    be.begin_capture();
    step();
    const GraphId g = be.end_capture();
    const uint64_t before = testing::heap_allocations().load();
    be.replay(g);
    be.replay(g);
    const uint64_t allocations = testing::heap_allocations().load() - before;
    EXPECT_EQ(allocations, 0u);
    EXPECT_TRUE(same_bits(get<float>(y1), e1));
    EXPECT_TRUE(same_bits(get<float>(y2), e2));
    EXPECT_TRUE(same_bits(get<float>(y3), e3));
}

// Prefill-sized products (T >= 128 on two threads) go to the threads by tokens: the kernel's bits for every token,
// in the order of the product's batch_rows (Q6_K: ggml's tiled order for the whole prompt), eager and replayed, and
// in a graph each such product gets a barrier of its own (any thread may use any part of the shared activation
// scratch) while decode-sized products behind them still share theirs.
TEST_F(QuantBackend, PrefillSizedMatmulsSplitByTokensGiveTheKernelsBits) {
    constexpr int64_t T = 150, K = 1024;  // four token chunks and a partial one
    const Weights wa = make_weights(load_fixture(DType::Q4_1), 37), wb = make_weights(load_fixture(DType::Q6_K), 21);
    const Weights wc = make_weights(load_fixture(DType::Q8_0), 45, DType::Q8_0_R16);
    const Tensor ta = weights("wa", wa), tb = weights("wb", wb), tc = weights("wc", wc);
    const std::vector<float> xv = randn(T * K), x3v = randn(3 * K);
    const Tensor x = f32("x", T, K, xv), x3 = f32("x3", 3, K, x3v);
    const Tensor ya = f32("ya", T, 37, std::vector<float>(T * 37)), yb = f32("yb", T, 21, std::vector<float>(T * 21));
    const Tensor yc = f32("yc", T, 45, std::vector<float>(T * 45)), y3 = f32("y3", 3, 37, std::vector<float>(3 * 37));
    const Tensor y4 = f32("y4", 3, 21, std::vector<float>(3 * 21));
    auto step = [&] {
        be.matmul(x, ta, nullptr, ya);
        be.matmul(x, tb, nullptr, yb, T);
        be.matmul(x, tc, nullptr, yc);
        be.matmul(x3, ta, nullptr, y3);
        be.matmul(x3, tb, nullptr, y4);
    };
    const auto direct = [&](const std::vector<float>& in, int64_t rows, const Weights& w,
                            cpu::QuantOrder order = cpu::QuantOrder::VecDot) {
        std::vector<float> y(static_cast<size_t>(rows * w.N));
        std::vector<uint8_t> act(cpu::matmul_quant_act_bytes(w.dt, rows, K));
        cpu::matmul_quant(in.data(), rows, K, w.bytes.data(), w.dt, nullptr, y.data(), w.N, 0, w.N, act.data(), order);
        return y;
    };
    const std::vector<std::vector<float>> want = {direct(xv, T, wa), direct(xv, T, wb, cpu::QuantOrder::Tiled),
                                                  direct(xv, T, wc), direct(x3v, 3, wa), direct(x3v, 3, wb)};
    const std::vector<Tensor> outs = {ya, yb, yc, y3, y4};
    step();
    for (size_t i = 0; i < outs.size(); ++i) EXPECT_TRUE(same_bits(get<float>(outs[i]), want[i])) << "eager " << i;
    for (const Tensor& t : outs) be.upload(t, std::vector<float>(static_cast<size_t>(t.numel()), 0.0f).data());
    be.begin_capture();
    step();
    const GraphId g = be.end_capture();
    EXPECT_EQ(be.graph_barriers(g), 4u);  // ya | yb | yc | y3 y4
    for (int r = 0; r < 3; ++r) {
        be.replay(g);
        for (size_t i = 0; i < outs.size(); ++i) EXPECT_TRUE(same_bits(get<float>(outs[i]), want[i])) << "replay " << i;
    }
}

// batch_rows picks ggml's order for the product llama.cpp computes the rows in, whatever rows this call has: a piece
// of 3 rows of an 8-row batch sums as ggml's tiled kernel does (K types), one of a 7-row batch as vec_dot, and so do
// matmuls and glu_matmul (the projection after the activation); the 32-element types have one order.
TEST_F(QuantBackend, MatmulSumsInTheOrderOfItsBatchRows) {
    constexpr int64_t K = 1024;
    const std::vector<float> xv = randn(3 * K), uv = randn(3 * K);
    const Tensor x = f32("x", 3, K, xv);
    for (DType dt : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q5_0, DType::Q8_0}) {
        SCOPED_TRACE(type_name(dt));
        const Weights w = make_weights(load_fixture(dt), 21);
        const Tensor tw = weights("w", w);
        const auto direct = [&](const std::vector<float>& in, cpu::QuantOrder order) {
            std::vector<float> y(static_cast<size_t>(3 * w.N));
            std::vector<uint8_t> act(cpu::matmul_quant_act_bytes(w.dt, 3, K));
            cpu::matmul_quant(in.data(), 3, K, w.bytes.data(), w.dt, nullptr, y.data(), w.N, 0, w.N, act.data(), order);
            return y;
        };
        const auto vec_dot = direct(xv, cpu::QuantOrder::VecDot), tiled = direct(xv, cpu::QuantOrder::Tiled);
        EXPECT_EQ(same_bits(vec_dot, tiled), dtype_block_elems(dt) == 32);
        for (const int64_t batch_rows : {1, 3, 7, 8, 512}) {
            SCOPED_TRACE("batch_rows " + std::to_string(batch_rows));
            const auto& want = batch_rows >= 8 ? tiled : vec_dot;
            const Tensor y = f32("y", 3, w.N, std::vector<float>(3 * w.N));
            be.matmul(x, tw, nullptr, y, batch_rows);
            EXPECT_TRUE(same_bits(get<float>(y), want));
            const Tensor y2 = f32("y2", 3, w.N, std::vector<float>(3 * w.N));
            const MatmulOut outs[] = {{&tw, nullptr, y2}};
            be.matmuls(x, outs, batch_rows);
            EXPECT_TRUE(same_bits(get<float>(y2), want));
            // glu_matmul: the product of glu(gate, up) by w, in the same order.
            const Tensor gate = f32("gate", 3, K, xv), up = f32("up", 3, K, uv), act = f32("act", 3, K, xv);
            be.glu(gate, up, Activation::Silu, act);
            const auto a = get<float>(act);
            const Tensor y3 = f32("y3", 3, w.N, std::vector<float>(3 * w.N));
            be.glu_matmul(gate, up, Activation::Silu, tw, y3, batch_rows);
            EXPECT_TRUE(same_bits(get<float>(y3), direct(a, batch_rows >= 8 ? cpu::ggml_quant_order(dt, 8)
                                                                             : cpu::QuantOrder::VecDot)));
        }
    }
    const Weights w = make_weights(load_fixture(DType::Q6_K), 5);
    const Tensor y = f32("y", 3, 5, std::vector<float>(15));
    EXPECT_THROW(be.matmul(x, weights("w", w), nullptr, y, 0), std::invalid_argument);
}

}  // namespace
}  // namespace tracelm
