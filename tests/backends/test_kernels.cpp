// The CPU kernels of every instruction set this machine can run, against double-precision references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "support/ggml_reference.h"
#include "support/test_support.h"

namespace tracelm::cpu {
namespace {

// Written here rather than taken from dtype.h so the kernels are checked against an independent decoding.
double decode_f16(uint16_t h) {
    const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0)
        v = std::ldexp(mant, -24);
    else if (exp == 31)
        v = mant != 0 ? NAN : INFINITY;
    else
        v = std::ldexp(1024 + mant, exp - 25);
    return sign != 0 ? -v : v;
}

// Random f16 with magnitude in [2^-6, 2^2): normal numbers with every mantissa bit in use.
uint16_t random_f16(std::mt19937& rng) {
    const uint32_t r = rng();
    return static_cast<uint16_t>(((r & 1u) << 15) | ((9 + (r >> 1) % 8) << 10) | ((r >> 4) & 0x3ffu));
}

struct Weights {
    DType dt;
    std::vector<uint8_t> bytes;
    std::vector<double> values;  // exactly what the kernels see after conversion to f32
    const void* data() const { return bytes.data(); }
};

Weights make_weights(DType dt, size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Weights w{dt, std::vector<uint8_t>(n * dtype_size(dt)), std::vector<double>(n)};
    for (size_t i = 0; i < n; ++i) {
        if (dt == DType::F32) {
            const float f = u(rng);
            std::memcpy(w.bytes.data() + 4 * i, &f, 4);
            w.values[i] = f;
        } else {
            const uint16_t h = dt == DType::BF16 ? f32_to_bf16(u(rng)) : random_f16(rng);
            std::memcpy(w.bytes.data() + 2 * i, &h, 2);
            w.values[i] = dt == DType::BF16 ? static_cast<double>(bf16_to_f32(h)) : decode_f16(h);
        }
    }
    return w;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& f : v) f = u(rng);
    return v;
}

using testing::same_bits;

class KernelTest : public ::testing::TestWithParam<Isa> {
   protected:
    void SetUp() override {
        if (!can_run(GetParam()))
            GTEST_SKIP() << "this CPU cannot run " << isa_name(GetParam());
    }
    const KernelTable& k() const { return kernels_for(GetParam()); }
    // Relative error allowed against sum |x w|: f32 accumulation, or bf16-rounded activations where the
    // AVX-512 BF16 dot product is used.
    double matmul_tol(DType wt) const {
        if (GetParam() == Isa::Avx512 && wt == DType::BF16 && cpu_features().avx512_bf16) return 8e-3;
        return 1e-5;
    }
};

INSTANTIATE_TEST_SUITE_P(Isas, KernelTest, ::testing::Values(Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512),
                         [](const ::testing::TestParamInfo<Isa>& p) { return std::string(isa_name(p.param)); });

const DType kWeightTypes[] = {DType::F32, DType::BF16, DType::F16};

// Computes rows [n0, n1) and checks them against the reference, and that no other output was written.
void check_matmul(const KernelTable& kt, double tol, int64_t T, int64_t K, int64_t N, DType wt, bool with_bias,
                  int64_t n0, int64_t n1, std::mt19937& rng) {
    SCOPED_TRACE("T=" + std::to_string(T) + " K=" + std::to_string(K) + " N=" + std::to_string(N) + " " +
                 std::string(dtype_name(wt)) + " range [" + std::to_string(n0) + "," + std::to_string(n1) + ")" +
                 (with_bias ? " bias" : ""));
    const std::vector<float> x = random_floats(static_cast<size_t>(T * K), rng);
    const Weights w = make_weights(wt, static_cast<size_t>(N * K), rng);
    const std::vector<float> bias = random_floats(static_cast<size_t>(N), rng);
    const float sentinel = 12345.0f;
    std::vector<float> y(static_cast<size_t>(T * N), sentinel);
    kt.matmul(x.data(), T, K, w.data(), wt, with_bias ? bias.data() : nullptr, y.data(), N, n0, n1);
    int failures = 0;
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t n = 0; n < N; ++n) {
            const float got = y[t * N + n];
            if (n < n0 || n >= n1) {
                if (got != sentinel && ++failures < 5)
                    ADD_FAILURE() << "wrote outside the range at t=" << t << " n=" << n;
                continue;
            }
            double ref = with_bias ? bias[n] : 0.0, mag = std::fabs(ref);
            for (int64_t kk = 0; kk < K; ++kk) {
                const double p = static_cast<double>(x[t * K + kk]) * w.values[n * K + kk];
                ref += p;
                mag += std::fabs(p);
            }
            if (std::fabs(got - ref) > tol * mag + 1e-30 && ++failures < 5)
                ADD_FAILURE() << "t=" << t << " n=" << n << " got " << got << " want " << ref << " (scale " << mag
                              << ")";
        }
    }
    EXPECT_EQ(failures, 0);
}

TEST_P(KernelTest, MatmulMatchesReference) {
    std::mt19937 rng(1);
    for (DType wt : kWeightTypes) {
        for (int64_t T : {1, 2, 3, 4, 5, 17, 48, 49, 130}) {
            for (int64_t K : {1, 7, 33, 1000, 1024 + 3}) {
                const int64_t N = T == 130 ? 53 : 37;
                check_matmul(k(), matmul_tol(wt), T, K, N, wt, (T + K) % 2 == 0, 0, N, rng);
            }
        }
    }
}

TEST_P(KernelTest, MatmulOverSubRangesAndManyPanelsMatchesReference) {
    std::mt19937 rng(2);
    for (DType wt : kWeightTypes) {
        check_matmul(k(), matmul_tol(wt), 1, 64, 131, wt, true, 5, 130, rng);
        check_matmul(k(), matmul_tol(wt), 3, 100, 50, wt, false, 17, 18, rng);
        check_matmul(k(), matmul_tol(wt), 9, 520, 140, wt, true, 1, 139, rng);
        check_matmul(k(), matmul_tol(wt), 6, 16, 10, wt, false, 4, 4, rng);
        check_matmul(k(), matmul_tol(wt), 70, 600, 140, wt, true, 3, 131, rng);
    }
}

TEST_P(KernelTest, MatmulWithZeroKGivesTheBias) {
    const float bias[3] = {1.5f, -2.0f, 0.25f};
    std::vector<float> y(6, 7.0f);
    const float x = 0.0f, w = 0.0f;
    k().matmul(&x, 2, 0, &w, DType::F32, bias, y.data(), 3, 0, 3);
    for (int t = 0; t < 2; ++t)
        for (int n = 0; n < 3; ++n) EXPECT_EQ(y[t * 3 + n], bias[n]);
}

// Every output must be bit-identical whatever row range and batch it was computed in.
TEST_P(KernelTest, MatmulIsDeterministicAcrossSplits) {
    std::mt19937 rng(3);
    const int64_t N = 61;
    for (DType wt : kWeightTypes) {
        for (int64_t T : {1, 3, 5, 17, 130}) {
            for (int64_t K : {33, 1024 + 3}) {
                SCOPED_TRACE("T=" + std::to_string(T) + " K=" + std::to_string(K) + " " + std::string(dtype_name(wt)));
                const std::vector<float> x = random_floats(static_cast<size_t>(T * K), rng);
                const Weights w = make_weights(wt, static_cast<size_t>(N * K), rng);
                const std::vector<float> bias = random_floats(static_cast<size_t>(N), rng);
                std::vector<float> whole(static_cast<size_t>(T * N));
                k().matmul(x.data(), T, K, w.data(), wt, bias.data(), whole.data(), N, 0, N);

                const std::vector<std::vector<int64_t>> splits = {{0, 1, N}, {0, 13, N}, {0, 7, 29, N}, {0, 30, 47, N}};
                for (const auto& cut : splits) {
                    std::vector<float> parts(static_cast<size_t>(T * N));
                    for (size_t i = 0; i + 1 < cut.size(); ++i)
                        k().matmul(x.data(), T, K, w.data(), wt, bias.data(), parts.data(), N, cut[i], cut[i + 1]);
                    EXPECT_EQ(std::memcmp(parts.data(), whole.data(), parts.size() * 4), 0) << "split at " << cut[1];
                }

                // Sub-batches take other code paths (register tiles, small-T kernels) and must agree.
                for (int64_t batch : {1, 2, 3, 4, 5, 9}) {
                    for (int64_t t0 = 0; t0 < T; t0 += batch) {
                        const int64_t tb = std::min(batch, T - t0);
                        std::vector<float> part(static_cast<size_t>(tb * N));
                        k().matmul(x.data() + t0 * K, tb, K, w.data(), wt, bias.data(), part.data(), N, 3, N);
                        int mismatches = 0;
                        for (int64_t t = 0; t < tb; ++t)
                            for (int64_t n = 3; n < N; ++n)
                                mismatches += !same_bits(part[t * N + n], whole[(t0 + t) * N + n]);
                        EXPECT_EQ(mismatches, 0) << "batch " << batch << " at token " << t0;
                    }
                }
            }
        }
    }
}

// One implementation for every Isa (ggml's double sum), so not per Isa.
// The AVX2 matmul's summation order as its file's header states it, written out in scalars: a second
// implementation of the order, so a kernel change that silently reorders the sums (and so changes results
// that replay and the split tests would still see as self-consistent) fails here.
float avx2_documented_dot(const float* x, const double* w, int64_t K, bool permute16) {
    const int64_t Kp = permute16 ? (K + 15) / 16 * 16 : K;
    std::vector<float> xs(static_cast<size_t>(Kp), 0.0f), ws(static_cast<size_t>(Kp), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
        // Column k = 16c + 2j + h sits at 16c + 8h + j once its chunk is split into even and odd columns.
        const int64_t at = permute16 ? k / 16 * 16 + (k % 2) * 8 + (k % 16) / 2 : k;
        xs[static_cast<size_t>(at)] = x[k];
        ws[static_cast<size_t>(at)] = static_cast<float>(w[k]);
    }
    float total = 0.0f;
    for (int64_t k0 = 0; k0 < Kp; k0 += 512) {
        float lane[8] = {};
        for (int64_t k = k0; k < std::min(Kp, k0 + 512); ++k)
            lane[(k - k0) % 8] = std::fma(xs[static_cast<size_t>(k)], ws[static_cast<size_t>(k)], lane[(k - k0) % 8]);
        total += ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
    return total;
}

// One Isa's matmul over shapes (T tokens; K with a partial chunk, a block plus a partial one, several blocks) for
// weights of the given types, every output bit for bit equal to documented(x row, w row, K, wt) + bias.
template <class Documented>
void expect_documented_order(Isa isa, const std::vector<DType>& types, std::initializer_list<int64_t> Ts,
                             uint32_t seed, Documented documented) {
    std::mt19937 rng(seed);
    const int64_t N = 21;
    for (DType wt : types) {
        for (int64_t T : Ts) {
            for (int64_t K : {5, 16, 33, 520, 1024 + 9}) {
                SCOPED_TRACE("T=" + std::to_string(T) + " K=" + std::to_string(K) + " " + std::string(dtype_name(wt)));
                const std::vector<float> x = random_floats(static_cast<size_t>(T * K), rng);
                const Weights w = make_weights(wt, static_cast<size_t>(N * K), rng);
                const std::vector<float> bias = random_floats(static_cast<size_t>(N), rng);
                std::vector<float> y(static_cast<size_t>(T * N));
                kernels_for(isa).matmul(x.data(), T, K, w.data(), wt, bias.data(), y.data(), N, 0, N);
                int mismatches = 0;
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t n = 0; n < N; ++n) {
                        const float want = documented(x.data() + t * K, w.values.data() + n * K, K, wt) +
                                           bias[static_cast<size_t>(n)];
                        mismatches += !same_bits(y[static_cast<size_t>(t * N + n)], want);
                    }
                EXPECT_EQ(mismatches, 0);
            }
        }
    }
}

TEST(Kernels, Avx2MatmulSumsInItsDocumentedOrder) {
    if (static_cast<int>(best_isa()) < static_cast<int>(Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
    expect_documented_order(Isa::Avx2, {std::begin(kWeightTypes), std::end(kWeightTypes)}, {1, 2, 3, 4, 60}, 11,
                            [](const float* x, const double* w, int64_t K, DType wt) {
                                return avx2_documented_dot(x, w, K, wt == DType::BF16);
                            });
}

// The AVX-512 matmul's FMA scheme (f32 and f16 weights; bf16 where the CPU lacks AVX512_BF16) as its file's header
// states it, written out in scalars: in each block of 512 columns, lane j of 16 collects x[k] * w[k] for
// k = j (mod 16) by fused multiply-add, the last chunk zero padded; lanes j and j + 8 are added, then the 8 as
// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); block sums are added in order to 0.0f.
float avx512_documented_dot(const float* x, const double* w, int64_t K) {
    const int64_t Kp = (K + 15) / 16 * 16;
    float total = 0.0f;
    for (int64_t k0 = 0; k0 < Kp; k0 += 512) {
        float lane[16] = {};
        for (int64_t k = k0; k < std::min(Kp, k0 + 512); ++k) {
            const float xk = k < K ? x[k] : 0.0f, wk = k < K ? static_cast<float>(w[k]) : 0.0f;
            lane[(k - k0) % 16] = std::fma(xk, wk, lane[(k - k0) % 16]);
        }
        float l[8];
        for (int j = 0; j < 8; ++j) l[j] = lane[j] + lane[j + 8];
        total += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
    return total;
}

// Token counts reach every register tile (1, 2, 3, 4 tokens), a streamed group of several tiles (48) and the
// panel path (60). With AVX512_BF16 the bf16 weights take the dot-product instruction instead, which rounds x to
// bf16: those are checked against the double-precision reference only (KernelTest.MatmulMatchesReference).
TEST(Kernels, Avx512MatmulSumsInItsDocumentedOrder) {
    if (best_isa() != Isa::Avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
    std::vector<DType> types = {DType::F32, DType::F16};
    if (!cpu_features().avx512_bf16) types.push_back(DType::BF16);
    expect_documented_order(Isa::Avx512, types, {1, 2, 3, 4, 48, 60}, 12,
                            [](const float* x, const double* w, int64_t K, DType) { return avx512_documented_dot(x, w, K); });
}

TEST(Kernels, RmsNormMatchesExactMathOnlyInItsRowsAndInPlace) {
    std::mt19937 rng(4);
    const float eps = 1e-6f;
    for (DType wt : kWeightTypes) {
        for (int64_t cols : {1, 7, 33, 1000, 1024 + 3}) {
            SCOPED_TRACE("cols=" + std::to_string(cols) + " " + std::string(dtype_name(wt)));
            const int64_t rows = 5, r0 = 1, r1 = 4;
            const std::vector<float> x = random_floats(static_cast<size_t>(rows * cols), rng, -3.0f, 3.0f);
            const Weights w = make_weights(wt, static_cast<size_t>(cols), rng);
            std::vector<float> out(x.size(), -1.0f);
            rms_norm(x.data(), w.data(), wt, eps, out.data(), cols, r0, r1);
            std::vector<float> in_place = x;
            rms_norm(in_place.data(), w.data(), wt, eps, in_place.data(), cols, r0, r1);
            for (int64_t r = 0; r < rows; ++r) {
                double ss = 0;
                for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(x[r * cols + c]) * x[r * cols + c];
                const double scale = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
                for (int64_t c = 0; c < cols; ++c) {
                    const size_t i = static_cast<size_t>(r * cols + c);
                    if (r < r0 || r >= r1) {
                        ASSERT_EQ(out[i], -1.0f) << "row " << r << " is outside the range";
                        ASSERT_EQ(in_place[i], x[i]);
                        continue;
                    }
                    const double ref = x[i] * scale * w.values[c];
                    ASSERT_NEAR(out[i], ref, 1e-5 * std::fabs(ref) + 1e-30) << "r=" << r << " c=" << c;
                    ASSERT_TRUE(same_bits(in_place[i], out[i])) << "aliased output differs at r=" << r << " c=" << c;
                }
            }
        }
    }
}

TEST_P(KernelTest, AddWritesOnlyItsRangeAndMayAliasAnInput) {
    std::mt19937 rng(5);
    const int64_t n = 1024 + 7;
    const std::vector<float> a = random_floats(n, rng), b = random_floats(n, rng);
    for (auto [i0, i1] : {std::pair<int64_t, int64_t>{0, n}, {3, 1003}, {5, 6}, {9, 9}}) {
        std::vector<float> out(n, 99.0f);
        k().add(a.data(), b.data(), out.data(), i0, i1);
        for (int64_t i = 0; i < n; ++i) {
            const float want = i >= i0 && i < i1 ? a[i] + b[i] : 99.0f;
            ASSERT_EQ(out[i], want) << "i=" << i << " range [" << i0 << "," << i1 << ")";
        }
    }
    std::vector<float> acc = a;  // out aliasing an input, as in a residual add
    k().add(acc.data(), b.data(), acc.data(), 0, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], a[i] + b[i]);
}

TEST_P(KernelTest, SiluMulIsWithinUlpsOfExactMathAndKeepsNan) {
    std::mt19937 rng(6);
    const int64_t n = 1024 + 7;
    std::vector<float> gate = random_floats(n, rng, -30.0f, 30.0f);
    const std::vector<float> up = random_floats(n, rng, -2.0f, 2.0f);
    const float specials[] = {0.0f,  -0.0f,  1e-30f, -1e-30f, 87.0f, -87.0f,
                              88.5f, -88.5f, 100.0f, -100.0f, 1e30f, -1e30f};
    for (size_t i = 0; i < std::size(specials); ++i) gate[10 + i] = specials[i];
    // [0, n_vec) by ggml_v_expf and the rest by expf: both are within a few ulp of the exact function.
    for (int64_t n_vec : {n, int64_t{1000}, int64_t{5}, int64_t{0}}) {
        std::vector<float> out(n + 1, 99.0f);
        k().silu_mul(gate.data(), up.data(), out.data(), n, n_vec);
        for (int64_t i = 0; i < n; ++i) {
            const double g = gate[i], ref = g / (1.0 + std::exp(-g)) * up[i];
            ASSERT_NEAR(out[i], ref, 4e-6 * std::fabs(ref) + 1e-30) << "gate " << g << " up " << up[i];
        }
        ASSERT_EQ(out[n], 99.0f);
    }
    const float nan_gate = NAN, one = 1.0f;
    for (int64_t n_vec : {0, 1}) {
        float out = 0.0f;
        k().silu_mul(&nan_gate, &one, &out, 1, n_vec);
        EXPECT_TRUE(std::isnan(out));
    }
}

// The free function runs each row's part of the range with ggml's split: expf for the row's last cols % 8.
TEST(Kernels, SiluMulSplitsRows) {
    std::mt19937 rng(8);
    const int64_t cols = 13, rows = 4, n = rows * cols;
    const std::vector<float> gate = random_floats(n, rng, -10.0f, 10.0f), up = random_floats(n, rng);
    std::vector<float> want(n);
    for (int64_t r = 0; r < rows; ++r)
        active_kernels().silu_mul(gate.data() + r * cols, up.data() + r * cols, want.data() + r * cols, cols, 8);
    for (auto [i0, i1] : {std::pair<int64_t, int64_t>{0, n}, {3, 50}, {9, 12}, {14, 15}, {7, 7}}) {
        std::vector<float> out(n, 99.0f);
        silu_mul(gate.data(), up.data(), out.data(), cols, i0, i1);
        for (int64_t i = 0; i < n; ++i)
            ASSERT_TRUE(same_bits(out[i], i >= i0 && i < i1 ? want[i] : 99.0f))
                << "i=" << i << " [" << i0 << "," << i1 << ")";
    }
}

TEST_P(KernelTest, DotAndAxpyMatchExactMath) {
    std::mt19937 rng(7);
    for (int64_t n : {0, 1, 7, 33, 1000, 1024 + 3}) {
        const std::vector<float> a = random_floats(static_cast<size_t>(n), rng);
        const std::vector<float> b = random_floats(static_cast<size_t>(n), rng);
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
            ref += static_cast<double>(a[i]) * b[i];
            mag += std::fabs(static_cast<double>(a[i]) * b[i]);
        }
        EXPECT_NEAR(k().dot_f32(a.data(), b.data(), n), ref, 1e-5 * mag + 1e-30) << "n=" << n;

        std::vector<float> y = b;
        y.push_back(42.0f);  // must stay untouched
        const float s = 0.75f;
        k().axpy_f32(s, a.data(), y.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            const double want = b[i] + static_cast<double>(s) * a[i];
            ASSERT_NEAR(y[i], want, 1e-6 * (std::fabs(b[i]) + std::fabs(s * a[i])) + 1e-30) << "n=" << n << " i=" << i;
        }
        EXPECT_EQ(y[n], 42.0f);
    }
}

// ggml's f32 MUL_MAT orders: every Isa gives ggml_reference.h's transcriptions of ggml_vec_dot_f32 and tinyBLAS bit
// for bit (K multiples of 32, of 8 only, and with a tail), for a window [n0, n1) of the rows, the rest untouched.
TEST_P(KernelTest, GgmlF32MatmulIsGgmlsOrder) {
    std::mt19937 rng(12);
    const int64_t T = 3, N = 11;
    for (const int64_t K : {64, 40, 36}) {
        const std::vector<float> x = random_floats(static_cast<size_t>(T * K), rng),
                                 w = random_floats(static_cast<size_t>(N * K), rng);
        for (const GgmlDot order : {GgmlDot::VecDot, GgmlDot::Tinyblas}) {
            if (order == GgmlDot::Tinyblas && K % 8 != 0) continue;
            std::vector<float> y(static_cast<size_t>(T * N), 99.0f);
            k().matmul_f32_ggml(x.data(), T, K, w.data(), y.data(), N, 2, 9, order);
            for (int64_t t = 0; t < T; ++t)
                for (int64_t n = 0; n < N; ++n) {
                    const float* xr = x.data() + t * K;
                    const float* wr = w.data() + n * K;
                    const float want = n < 2 || n >= 9 ? 99.0f
                                       : order == GgmlDot::VecDot ? ggml_ref::vec_dot_f32(K, xr, wr)
                                                                  : ggml_ref::tinyblas_dot_f32(K, wr, xr);
                    ASSERT_TRUE(same_bits(y[static_cast<size_t>(t * N + n)], want)) << K << " " << t << " " << n;
                }
        }
    }
}

TEST_P(KernelTest, RowToF32DecodesEveryWeightTypeExactly) {
    std::mt19937 rng(8);
    for (DType dt : kWeightTypes) {
        for (int64_t cols : {1, 7, 33, 1024 + 3}) {
            Weights w = make_weights(dt, static_cast<size_t>(cols), rng);
            if (dt == DType::F16 && cols > 8) {
                // Zeros, subnormals, the largest finite value and infinities.
                const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff, 0x7c00, 0xfc00, 0x3c00};
                for (size_t i = 0; i < std::size(specials); ++i) {
                    std::memcpy(w.bytes.data() + 2 * i, &specials[i], 2);
                    w.values[i] = decode_f16(specials[i]);
                }
            }
            std::vector<float> out(static_cast<size_t>(cols) + 1, 5.0f);
            k().row_to_f32(w.data(), dt, cols, out.data());
            for (int64_t i = 0; i < cols; ++i)
                ASSERT_TRUE(same_bits(out[i], static_cast<float>(w.values[i])))
                    << dtype_name(dt) << " i=" << i << " got " << out[i] << " want " << w.values[i];
            EXPECT_EQ(out[cols], 5.0f);
        }
    }
}

TEST_P(KernelTest, ReadSweepReadsEveryByte) {
    for (size_t bytes : {size_t{1}, size_t{7}, size_t{1000}, size_t{4096 + 3}}) {
        std::vector<uint8_t> buf(bytes, 0);
        EXPECT_EQ(k().read_sweep(buf.data(), bytes), 0.0);
        for (size_t pos : {size_t{0}, bytes / 2, bytes - 1}) {
            buf.assign(bytes, 0);
            buf[pos] = 1;
            EXPECT_NE(k().read_sweep(buf.data(), bytes), 0.0) << "byte " << pos << " of " << bytes;
        }
    }
}

TEST(CpuFeatures, IsaSelectionIsConsistent) {
    const CpuFeatures& f = cpu_features();
    const Isa best = best_isa();
    EXPECT_EQ(best != Isa::Portable, f.avx2 && f.fma && f.f16c);
    const bool avx512 = f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
    EXPECT_EQ(best == Isa::Avx512, avx512);
    EXPECT_EQ(best == Isa::AvxVnni, !avx512 && f.avx2 && f.fma && f.f16c && f.avx_vnni);
    EXPECT_EQ(can_run(Isa::AvxVnni), f.avx2 && f.fma && f.f16c && f.avx_vnni);
    EXPECT_TRUE(f.avx512f || !f.avx512_bf16);
    EXPECT_TRUE(can_run(active_isa()));
    EXPECT_LE(static_cast<int>(active_isa()), static_cast<int>(best));
    EXPECT_EQ(active_kernels().isa, active_isa());
    for (Isa isa : {Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512}) {
        if (can_run(isa)) {
            EXPECT_LE(static_cast<int>(isa), static_cast<int>(best));
            EXPECT_EQ(kernels_for(isa).isa, isa);
        } else {
            EXPECT_THROW(kernels_for(isa), std::invalid_argument);
        }
    }
    EXPECT_STREQ(isa_name(Isa::Portable), "portable");
    EXPECT_STREQ(isa_name(Isa::Avx2), "avx2");
    EXPECT_STREQ(isa_name(Isa::AvxVnni), "avxvnni");
    EXPECT_STREQ(isa_name(Isa::Avx512), "avx512");
}

// What TRACELM_ISA asks for, clamped to the CPU (the widest Isa it runs at or below it); best_isa() when unset.
Isa expected_active_isa() {
    const char* env = std::getenv("TRACELM_ISA");
    Isa isa = best_isa();
    for (Isa each : {Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512})
        if (env != nullptr && std::string(env) == isa_name(each) && each < best_isa()) isa = each;
    const Isa down[] = {Isa::Avx512, Isa::AvxVnni, Isa::Avx2, Isa::Portable};
    for (Isa each : down)
        if (each <= isa && can_run(each)) return each;
    return Isa::Portable;
}

TEST(CpuFeatures, ActiveIsaMatchesEnvironment) { EXPECT_EQ(active_isa(), expected_active_isa()); }

// active_isa() reads the environment once per process, so each setting is checked in a child process.
TEST(CpuFeatures, TracelmIsaLowersTheActiveIsaAndBogusValuesAreIgnored) {
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    for (const char* isa : {"portable", "avx2", "avxvnni", "avx512", "bogus"}) {
        const std::string cmd = std::string("TRACELM_ISA=") + isa + " '" + self +
                                "' --gtest_filter=CpuFeatures.ActiveIsaMatchesEnvironment 2>&1";
        FILE* pipe = popen(cmd.c_str(), "r");
        ASSERT_NE(pipe, nullptr);
        std::string out;
        char buf[256];
        while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
        EXPECT_EQ(pclose(pipe), 0) << "TRACELM_ISA=" << isa << "\n" << out;
        EXPECT_NE(out.find("[  PASSED  ] 1 test."), std::string::npos) << out;
    }
}

TEST(CpuKernels, FreeFunctionsRejectNonFloatWeights) {
    float x = 1.0f, y = 0.0f;
    const int32_t w = 1;
    EXPECT_THROW(matmul(&x, 1, 1, &w, DType::I32, nullptr, &y, 1, 0, 1), std::invalid_argument);
    EXPECT_THROW(rms_norm(&x, &w, DType::I32, 1e-6f, &y, 1, 0, 1), std::invalid_argument);
    EXPECT_THROW(row_to_f32(&w, DType::I64, 1, &y), std::invalid_argument);
}

}  // namespace
}  // namespace tracelm::cpu
