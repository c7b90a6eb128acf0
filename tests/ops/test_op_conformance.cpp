// Every op of the Backend interface, on every backend of the registry, against the CPU backend (the
// reference, itself checked against double-precision references in test_backend_ops.cpp and friends):
// random inputs go through the reference eagerly, then through the backend under test eagerly and once more
// captured into a graph and replayed. Float outputs must agree within a relative bound (summation order may
// differ between backends); integer outputs (ids, indices, decode state) exactly. Fused ops are held to the
// reference running the ops they fuse, one after the other.
//
// The backend list comes from backends/registry.h, so a new backend is covered once it registers. A backend
// this process cannot use (not built, no device) skips with the reason; the "cpu" instance compares the CPU
// backend's captured replay with its eager run, so the suite means something on machines without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/registry.h"
#include "ops/dsa/dsa_topk.h"

namespace tracelm {
namespace {

// A tensor an op touches, with its contents before the op.
struct HostTensor {
    std::string name;
    DType dtype;
    int64_t rows, cols;
    std::vector<unsigned char> bytes;
};

template <typename T>
HostTensor host(const std::string& name, DType dt, int64_t rows, int64_t cols, const std::vector<T>& v) {
    HostTensor h{name, dt, rows, cols, std::vector<unsigned char>(v.size() * sizeof(T))};
    std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
    return h;
}
HostTensor f32(const std::string& n, int64_t r, int64_t c, const std::vector<float>& v) { return host(n, DType::F32, r, c, v); }
HostTensor i32(const std::string& n, int64_t r, int64_t c, const std::vector<int32_t>& v) { return host(n, DType::I32, r, c, v); }
HostTensor i64(const std::string& n, int64_t r, int64_t c, const std::vector<int64_t>& v) { return host(n, DType::I64, r, c, v); }
// Weights in f32, bf16 or f16 (values rounded to the type).
HostTensor weight(const std::string& n, DType dt, int64_t r, int64_t c, const std::vector<float>& v) {
    if (dt == DType::F32) return f32(n, r, c, v);
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
    return host(n, dt, r, c, h);
}

// What an op sees on one backend: its tensors (in the case's order) and a dsa_topk workspace.
struct Bound {
    std::vector<Tensor> t;
    DsaTopkWorkspace ws;
};

struct OpCase {
    std::string name;
    std::vector<HostTensor> tensors;
    std::vector<size_t> outputs;  // indices into tensors compared after the op
    double rel_tol;               // float outputs: max |got - want| <= rel_tol * max |want|
    std::function<void(Backend&, const Bound&)> run;
    // What the reference backend runs instead of `run`, when set: fused ops are checked against the
    // composition of the ops they fuse.
    std::function<void(Backend&, const Bound&)> reference = {};
};

constexpr int64_t kWsRows = 8, kWsKeys = 1024;

// A case's tensors on one backend, uploaded with their initial contents.
class Placed {
   public:
    Placed(Backend& be, const OpCase& c) : be_(be), c_(c) {
        for (const HostTensor& h : c.tensors) {
            Buffer* b = be.alloc(h.bytes.size(), h.name);
            buffers_.push_back(b);
            bound_.t.push_back(whole(b, h.dtype, h.rows, h.cols));
        }
        bound_.ws = dsa::make_topk_workspace(be, kWsRows, kWsKeys);
        buffers_.push_back(bound_.ws.buffer);
        reset();
    }
    ~Placed() {
        for (Buffer* b : buffers_) be_.free(b);
    }
    Placed(const Placed&) = delete;
    Placed& operator=(const Placed&) = delete;

    void reset() {
        for (size_t i = 0; i < c_.tensors.size(); ++i) be_.upload(bound_.t[i], c_.tensors[i].bytes.data());
    }
    void run() { c_.run(be_, bound_); }
    void run_reference() { (c_.reference ? c_.reference : c_.run)(be_, bound_); }
    std::vector<std::vector<unsigned char>> outputs() {
        std::vector<std::vector<unsigned char>> out;
        for (size_t i : c_.outputs) {
            out.emplace_back(bound_.t[i].nbytes());
            be_.download(bound_.t[i], out.back().data());
        }
        return out;
    }

   private:
    Backend& be_;
    const OpCase& c_;
    std::vector<Buffer*> buffers_;
    Bound bound_;
};

std::vector<float> as_floats(const std::vector<unsigned char>& b) {
    std::vector<float> f(b.size() / sizeof(float));
    std::memcpy(f.data(), b.data(), b.size());
    return f;
}

void expect_close(const OpCase& c, const std::vector<std::vector<unsigned char>>& want,
                  const std::vector<std::vector<unsigned char>>& got, const std::string& how) {
    for (size_t o = 0; o < c.outputs.size(); ++o) {
        const HostTensor& h = c.tensors[c.outputs[o]];
        const std::string where = c.name + " (" + how + "), output '" + h.name + "'";
        if (h.dtype != DType::F32) {
            EXPECT_EQ(want[o], got[o]) << where << ": integer outputs must match exactly";
            continue;
        }
        const std::vector<float> w = as_floats(want[o]), g = as_floats(got[o]);
        double scale = 0.0, err = 0.0;
        size_t worst = 0;
        for (size_t i = 0; i < w.size(); ++i) {
            ASSERT_EQ(std::isnan(w[i]), std::isnan(g[i])) << where << " element " << i;
            if (std::isnan(w[i])) continue;
            scale = std::max(scale, std::abs(static_cast<double>(w[i])));
            const double e = std::abs(static_cast<double>(g[i]) - w[i]);
            if (e > err) err = e, worst = i;
        }
        EXPECT_LE(err, c.rel_tol * std::max(scale, 1e-30))
            << where << ": worst element " << worst << " got " << g[worst] << " want " << w[worst];
    }
}

std::vector<float> randn(std::mt19937& rng, size_t n, float sigma = 1.0f) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

constexpr double kElementwise = 1e-6;  // one rounding, or exp/sin/cos at a few ulp
constexpr double kReduction = 1e-5;    // sums over up to a few thousand terms in another order

constexpr DType kWeightTypes[] = {DType::F32, DType::BF16, DType::F16};
std::string dt(DType d) { return std::string(dtype_name(d)); }

// ---- the cases, one list per op ----

std::vector<OpCase> copy_cases(std::mt19937& rng) {
    return {{"copy", {f32("src", 5, 37, randn(rng, 5 * 37)), f32("dst", 5, 37, std::vector<float>(5 * 37))}, {1},
             0.0, [](Backend& be, const Bound& b) { be.copy(b.t[1], b.t[0]); }}};
}

std::vector<OpCase> embedding_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for (DType w : kWeightTypes) {
        // Ids outside [0, rows) give zero rows.
        out.push_back({"embedding " + dt(w),
                       {i32("ids", 1, 9, {3, 0, 49, -1, 50, 7, 7, 12, 1 << 30}),
                        weight("table", w, 50, 72, randn(rng, 50 * 72)), f32("out", 9, 72, std::vector<float>(9 * 72))},
                       {2},
                       0.0,
                       [](Backend& be, const Bound& b) { be.embedding(b.t[0], b.t[1], b.t[2]); }});
    }
    return out;
}

std::vector<OpCase> rms_norm_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for (DType w : kWeightTypes) {
        out.push_back({"rms_norm " + dt(w),
                       {f32("x", 7, 1000, randn(rng, 7000, 3.0f)), weight("w", w, 1, 1000, randn(rng, 1000)),
                        f32("out", 7, 1000, std::vector<float>(7000))},
                       {2},
                       kReduction,
                       [](Backend& be, const Bound& b) { be.rms_norm(b.t[0], b.t[1], 1e-6f, b.t[2]); }});
        // In place over per-head rows, as the decoder's q/k norm runs it.
        out.push_back({"rms_norm in place " + dt(w),
                       {f32("x", 6, 128, randn(rng, 6 * 128)), weight("w", w, 1, 64, randn(rng, 64))},
                       {0},
                       kReduction,
                       [](Backend& be, const Bound& b) {
                           const Tensor heads = b.t[0].view(12, 64);
                           be.rms_norm(heads, b.t[1], 1e-6f, heads);
                       }});
    }
    return out;
}

// Calls f(weight type, T, K) for the shapes matmul-like ops are checked at. T: decode batch buckets and the
// largest matrix-vector batch, then prefill sizes. K = 67 is not a multiple of 8 (the unvectorised path).
template <typename F>
void for_matmul_shapes(F&& f) {
    for (DType w : kWeightTypes)
        for (int64_t T : {1, 3, 8, 32, 33, 100})
            for (int64_t K : {256, 67}) f(w, T, K);
}

std::vector<OpCase> matmul_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for_matmul_shapes([&](DType w, int64_t T, int64_t K) {
        const int64_t N = 45;
        const bool bias = T % 2 == 1;
        out.push_back({"matmul " + dt(w) + " T=" + std::to_string(T) + " K=" + std::to_string(K) + (bias ? " bias" : ""),
                       {f32("x", T, K, randn(rng, static_cast<size_t>(T * K))),
                        weight("w", w, N, K, randn(rng, static_cast<size_t>(N * K))), f32("bias", 1, N, randn(rng, N)),
                        f32("y", T, N, std::vector<float>(T * N))},
                       {3},
                       kReduction,
                       [bias](Backend& be, const Bound& b) {
                           be.matmul(b.t[0], b.t[1], bias ? &b.t[2] : nullptr, b.t[3]);
                       }});
    });
    return out;
}

// RoPE frequency factors of a head of 64 (Llama 3.1 style: 1 for the fast pairs, 8 for the slow ones, a smooth
// band between), for the scaled cases.
std::vector<float> rope_test_factors() {
    std::vector<float> f(32);
    for (size_t i = 0; i < f.size(); ++i) f[i] = i < 10 ? 1.0f : i < 20 ? 1.0f + 0.7f * static_cast<float>(i - 10) : 8.0f;
    return f;
}

std::vector<OpCase> rope_cases(std::mt19937& rng) {
    const int heads = 3, hd = 64;
    std::vector<OpCase> out;
    for (const bool scaled : {false, true}) {
        out.push_back({scaled ? "rope_neox scaled" : "rope_neox",
                       {f32("x", 5, heads * hd, randn(rng, 5 * heads * hd)), i32("pos", 1, 5, {0, 1, 17, 1000, 4095})},
                       {0},
                       // Angles up to 4095 rad: a 1-ulp difference in the angle moves sin/cos by ~2e-7 absolute.
                       1e-5,
                       [scaled, factors = rope_test_factors()](Backend& be, const Bound& b) {
                           be.rope_neox(b.t[0], b.t[1], heads, hd, RopeSpec{1e6f, scaled ? factors : std::span<const float>()});
                       }});
    }
    return out;
}

std::vector<OpCase> kv_write_cases(std::mt19937& rng) {
    return {{"kv_write",
             {f32("k", 4, 24, randn(rng, 96)), f32("v", 4, 24, randn(rng, 96)), i32("slots", 1, 4, {3, -1, 10, 16}),
              f32("kc", 16, 24, randn(rng, 16 * 24)), f32("vc", 16, 24, randn(rng, 16 * 24))},
             {3, 4},
             0.0,
             [](Backend& be, const Bound& b) { be.kv_write(b.t[0], b.t[1], b.t[2], b.t[3], b.t[4]); }}};
}

// Paged attention geometry: GQA 4:2, head_dim 64, 4-token blocks scattered over a 128-block pool.
struct AttnCase {
    std::string name;
    std::vector<int32_t> seq_lens, q_lens;
    int max_blocks;
};

std::vector<OpCase> attention_cases(std::mt19937& rng, bool sparse) {
    const int H = 4, KV = 2, hd = 64, bs = 4, num_blocks = 128;
    const std::vector<AttnCase> shapes = {
        // A prefill chunk after earlier context, and a second sequence starting from scratch.
        {"prefill", {11, 7}, {3, 7}, 6},
        // Decode: one new token per sequence over long contexts (the split path on a GPU), plus a padded row
        // (length 0, no blocks) as a batch bucket makes.
        {"decode", {301, 64, 0}, {1, 1, 1}, 100},
    };
    std::vector<OpCase> out;
    for (const AttnCase& s : shapes) {
        const int S = static_cast<int>(s.seq_lens.size());
        int T = 0;
        std::vector<int32_t> qsl = {0};
        for (int32_t q : s.q_lens) qsl.push_back(T += q);
        // Blocks drawn without replacement; the padded row and one block of the first sequence are unassigned.
        std::vector<int32_t> pool(num_blocks);
        for (int i = 0; i < num_blocks; ++i) pool[i] = i;
        std::shuffle(pool.begin(), pool.end(), rng);
        std::vector<int32_t> table(static_cast<size_t>(S) * s.max_blocks, -1);
        size_t next = 0;
        for (int q = 0; q < S; ++q) {
            const int need = (s.seq_lens[q] + bs - 1) / bs;
            for (int b = 0; b < need; ++b) table[q * s.max_blocks + b] = pool[next++ % num_blocks];
        }
        table[1] = -1;
        const int topk = 40;
        std::vector<int64_t> idx(static_cast<size_t>(T) * topk);
        for (int t = 0; t < T; ++t) {
            // Ascending picks with padding and positions beyond what the row may see.
            std::vector<int64_t> row;
            for (int j = 0; j < topk; ++j) row.push_back(j % 7 == 3 ? -1 : static_cast<int64_t>(j) * 9 + t);
            std::copy(row.begin(), row.end(), idx.begin() + static_cast<int64_t>(t) * topk);
        }
        std::vector<HostTensor> ts = {f32("q", T, H * hd, randn(rng, static_cast<size_t>(T) * H * hd)),
                                      f32("kc", num_blocks * bs, KV * hd, randn(rng, num_blocks * bs * KV * hd)),
                                      f32("vc", num_blocks * bs, KV * hd, randn(rng, num_blocks * bs * KV * hd)),
                                      i32("bt", S, s.max_blocks, table),
                                      i32("lens", 1, S, s.seq_lens),
                                      i32("qsl", 1, S + 1, qsl),
                                      f32("out", T, H * hd, std::vector<float>(static_cast<size_t>(T) * H * hd)),
                                      i64("idx", T, topk, idx)};
        out.push_back({std::string(sparse ? "sparse_attention " : "attention ") + s.name, ts, {6}, kReduction,
                       [S, sparse](Backend& be, const Bound& b) {
                           const AttentionMeta meta{b.t[3], b.t[4], b.t[5], S, bs};
                           const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
                           if (sparse) {
                               be.sparse_attention(b.t[0], b.t[1], b.t[2], meta, b.t[7], H, KV, hd, scale, b.t[6]);
                           } else {
                               be.attention(b.t[0], b.t[1], b.t[2], meta, H, KV, hd, scale, b.t[6]);
                           }
                       }});
    }
    return out;
}

std::vector<OpCase> elementwise_cases(std::mt19937& rng) {
    const int64_t n = 3 * 1000;
    return {{"add",
             {f32("a", 3, 1000, randn(rng, n)), f32("b", 3, 1000, randn(rng, n)), f32("out", 3, 1000, std::vector<float>(n))},
             {2},
             0.0,
             [](Backend& be, const Bound& b) { be.add(b.t[0], b.t[1], b.t[2]); }},
            {"silu_mul",
             {f32("gate", 3, 1000, randn(rng, n, 4.0f)), f32("up", 3, 1000, randn(rng, n)),
              f32("out", 3, 1000, std::vector<float>(n))},
             {2},
             kElementwise,
             [](Backend& be, const Bound& b) { be.silu_mul(b.t[0], b.t[1], b.t[2]); }}};
}

// ---- fused ops, against the ops they fuse run on the reference ----

std::vector<OpCase> add_rms_norm_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for (DType w : kWeightTypes) {
        out.push_back({"add_rms_norm " + dt(w),
                       {f32("x", 7, 1000, randn(rng, 7000, 3.0f)), f32("delta", 7, 1000, randn(rng, 7000)),
                        weight("w", w, 1, 1000, randn(rng, 1000)), f32("out", 7, 1000, std::vector<float>(7000))},
                       {0, 3},
                       kReduction,
                       [](Backend& be, const Bound& b) { be.add_rms_norm(b.t[0], b.t[1], b.t[2], 1e-6f, b.t[3]); },
                       [](Backend& be, const Bound& b) {
                           be.add(b.t[0], b.t[1], b.t[0]);
                           be.rms_norm(b.t[0], b.t[2], 1e-6f, b.t[3]);
                       }});
    }
    return out;
}

std::vector<OpCase> qk_norm_rope_kv_write_cases(std::mt19937& rng) {
    const int T = 5, H = 4, KV = 2, hd = 64;
    const int64_t q_dim = H * hd, kv_dim = KV * hd, slots = 16;
    static const std::vector<float> factors = rope_test_factors();
    std::vector<OpCase> out;
    for (const bool norm : {true, false}) {
        for (DType w : {DType::F32, DType::BF16}) {
            if (!norm && w != DType::F32) continue;
            for (const bool scaled : {false, true}) {
                const RopeSpec rope{1e6f, scaled ? std::span<const float>(factors) : std::span<const float>()};
                const auto tensors = [norm, rope](const Bound& b) {
                    return QkvPrologue{b.t[0], b.t[1], b.t[2], norm ? &b.t[3] : nullptr, norm ? &b.t[4] : nullptr,
                                       1e-6f, b.t[5], rope, b.t[6], b.t[7], b.t[8], H, KV, hd};
                };
                out.push_back(
                    {std::string("qk_norm_rope_kv_write ") + (norm ? "normed " + dt(w) : "without norm") +
                         (scaled ? " scaled" : ""),
                     {f32("q", T, q_dim, randn(rng, T * q_dim, 2.0f)), f32("k", T, kv_dim, randn(rng, T * kv_dim, 2.0f)),
                      f32("v", T, kv_dim, randn(rng, T * kv_dim)), weight("q_norm", w, 1, hd, randn(rng, hd)),
                      weight("k_norm", w, 1, hd, randn(rng, hd)), i32("pos", 1, T, {0, 1, 17, 1000, 4095}),
                      i32("slots", 1, T, {3, -1, 10, 15, 16}), f32("kc", slots, kv_dim, randn(rng, slots * kv_dim)),
                      f32("vc", slots, kv_dim, randn(rng, slots * kv_dim))},
                     {0, 1, 7, 8},
                     1e-5,  // as rope_neox: angles up to 4095 rad
                     [tensors](Backend& be, const Bound& b) { be.qk_norm_rope_kv_write(tensors(b)); },
                     [norm, rope](Backend& be, const Bound& b) {
                         if (norm) {
                             const Tensor qh = b.t[0].view(T * H, hd), kh = b.t[1].view(T * KV, hd);
                             be.rms_norm(qh, b.t[3], 1e-6f, qh);
                             be.rms_norm(kh, b.t[4], 1e-6f, kh);
                         }
                         be.rope_neox(b.t[0], b.t[5], H, hd, rope);
                         be.rope_neox(b.t[1], b.t[5], KV, hd, rope);
                         be.kv_write(b.t[1], b.t[2], b.t[6], b.t[7], b.t[8]);
                     }});
            }
        }
    }
    return out;
}

std::vector<OpCase> matmuls_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    const int64_t K = 256;
    for (DType w : kWeightTypes) {
        for (int64_t T : {1, 8, 33}) {
            for (const bool three : {true, false}) {
                // q/k/v-like: three matrices, biases on two of them; gate/up-like: two, no bias.
                const std::vector<int64_t> N = three ? std::vector<int64_t>{45, 20, 21} : std::vector<int64_t>{37, 37};
                std::vector<HostTensor> t{f32("x", T, K, randn(rng, static_cast<size_t>(T * K)))};
                for (size_t i = 0; i < N.size(); ++i) {
                    const std::string id = std::to_string(i);
                    t.push_back(weight("w" + id, w, N[i], K, randn(rng, static_cast<size_t>(N[i] * K))));
                    t.push_back(f32("bias" + id, 1, N[i], randn(rng, static_cast<size_t>(N[i]))));
                    t.push_back(f32("y" + id, T, N[i], std::vector<float>(static_cast<size_t>(T * N[i]))));
                }
                const size_t n = N.size();
                // Tensors of output i: w 1+3i, bias 2+3i, y 3+3i; the first output has no bias.
                const auto bias = [](const Bound& b, size_t i) { return i == 0 ? nullptr : &b.t[2 + 3 * i]; };
                std::vector<size_t> outputs;
                for (size_t i = 0; i < n; ++i) outputs.push_back(3 + 3 * i);
                out.push_back({"matmuls " + dt(w) + " T=" + std::to_string(T) + " outputs=" + std::to_string(n), t,
                               outputs, kReduction,
                               [n, bias](Backend& be, const Bound& b) {
                                   std::vector<MatmulOut> outs;
                                   for (size_t i = 0; i < n; ++i) outs.push_back({&b.t[1 + 3 * i], bias(b, i), b.t[3 + 3 * i]});
                                   be.matmuls(b.t[0], outs);
                               },
                               [n, bias](Backend& be, const Bound& b) {
                                   for (size_t i = 0; i < n; ++i) be.matmul(b.t[0], b.t[1 + 3 * i], bias(b, i), b.t[3 + 3 * i]);
                               }});
            }
        }
    }
    return out;
}

std::vector<OpCase> silu_mul_matmul_cases(std::mt19937& rng) {
    std::vector<OpCase> out;
    for_matmul_shapes([&](DType w, int64_t T, int64_t K) {
        const int64_t N = 45;
        out.push_back({"silu_mul_matmul " + dt(w) + " T=" + std::to_string(T) + " K=" + std::to_string(K),
                       {f32("gate", T, K, randn(rng, static_cast<size_t>(T * K), 3.0f)),
                        f32("up", T, K, randn(rng, static_cast<size_t>(T * K))),
                        weight("w", w, N, K, randn(rng, static_cast<size_t>(N * K))),
                        f32("y", T, N, std::vector<float>(T * N))},
                       {3},
                       kReduction,
                       [](Backend& be, const Bound& b) { be.silu_mul_matmul(b.t[0], b.t[1], b.t[2], b.t[3]); },
                       [](Backend& be, const Bound& b) {
                           be.silu_mul(b.t[0], b.t[1], b.t[0]);
                           be.matmul(b.t[0], b.t[2], nullptr, b.t[3]);
                       }});
    });
    return out;
}

std::vector<OpCase> gather_last_cases(std::mt19937& rng) {
    // Sequences of 0 (first: no last row), 3, 0 and 7 tokens.
    return {{"gather_last",
             {f32("x", 10, 33, randn(rng, 330)), i32("qsl", 1, 5, {0, 0, 3, 3, 10}),
              f32("out", 4, 33, std::vector<float>(132))},
             {2},
             0.0,
             [](Backend& be, const Bound& b) { be.gather_last(b.t[0], b.t[1], b.t[2]); }}};
}

std::vector<OpCase> argmax_cases(std::mt19937& rng) {
    const int64_t V = 3001;
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::vector<float> l = randn(rng, 7 * V);
    auto row = [&](int r) { return l.begin() + r * V; };
    // Row 0: plain. Row 1: a tie between 10 and 2900 (10 wins). Row 2: NaN everywhere but one value.
    // Row 3: all NaN (0). Row 4: all -inf behind a NaN (index 1). Row 5: NaN at the front and the maximum last.
    // Row 6: +inf twice (the first wins).
    row(1)[10] = row(1)[2900] = 100.0f;
    std::fill(row(2), row(2) + V, nan);
    row(2)[1234] = -5.0f;
    std::fill(row(3), row(3) + V, nan);
    std::fill(row(4), row(4) + V, -inf);
    row(4)[0] = nan;
    row(5)[0] = nan;
    row(5)[V - 1] = 50.0f;
    row(6)[77] = row(6)[78] = inf;
    return {{"argmax", {f32("logits", 7, V, l), i32("ids", 1, 7, std::vector<int32_t>(7, -7))}, {1}, 0.0,
             [](Backend& be, const Bound& b) { be.argmax(b.t[0], b.t[1]); }}};
}

std::vector<OpCase> advance_cases() {
    // Three sequences, 4-token blocks, 3 blocks each: the first crosses into its next block, the second into an
    // unassigned block (slot -1), the third past the block table (slot -1).
    const std::vector<int32_t> tables = {5, 2, 9, 1, 7, -1, 3, 4, 8};
    return {{"advance_decode",
             {i32("sampled", 1, 3, {11, 22, 33}), i32("ids", 1, 3, {0, 0, 0}), i32("pos", 1, 3, {3, 7, 11}),
              i32("slots", 1, 3, {23, 19, 35}), i32("lens", 1, 3, {4, 8, 12}), i32("bt", 3, 3, tables),
              i32("step", 1, 1, {2}), i32("history", 5, 3, std::vector<int32_t>(15, -9))},
             {1, 2, 3, 4, 6, 7},
             0.0,
             [](Backend& be, const Bound& b) {
                 DecodeState st;
                 st.token_ids = b.t[1];
                 st.positions = b.t[2];
                 st.slot_mapping = b.t[3];
                 st.seq_lens = b.t[4];
                 st.block_tables = b.t[5];
                 st.step = b.t[6];
                 st.history = b.t[7];
                 st.block_size = 4;
                 be.advance_decode(b.t[0], st);
             }}};
}

std::vector<OpCase> dsa_cases(std::mt19937& rng) {
    const int64_t T = 4, nk = 700, topk = 16, H = 4, D = 16, keys = 50;
    std::vector<float> scores = randn(rng, T * nk);
    for (int64_t i = 0; i < nk; i += 3) scores[i] = 0.5f;  // ties in row 0
    return {{"dsa_topk",
             {f32("scores", T, nk, scores), i64("start", 1, T, {0, -5, 100, 650}), i64("end", 1, T, {700, 10, 400, 660}),
              i64("idx", T, topk, std::vector<int64_t>(T * topk, -7))},
             {3},
             0.0,
             [](Backend& be, const Bound& b) { be.dsa_topk(b.t[0], b.t[1], b.t[2], b.ws, b.t[3]); }},
            {"dsa_indexer",
             {f32("q", T, H * D, randn(rng, T * H * D)), f32("w", T, H, randn(rng, T * H)),
              f32("keys", keys, D, randn(rng, keys * D)), f32("scores", T, keys, std::vector<float>(T * keys))},
             {3},
             kReduction,
             [](Backend& be, const Bound& b) { be.dsa_indexer(b.t[0], b.t[1], b.t[2], H, b.t[3]); }}};
}

class OpConformance : public ::testing::TestWithParam<std::string> {
   protected:
    void SetUp() override {
        for (const BackendInfo& info : backend_registry()) {
            if (info.name != GetParam()) continue;
            const std::string why = info.unavailable();
            if (!why.empty()) GTEST_SKIP() << why;
            be_ = info.make({2});
        }
        ASSERT_NE(be_, nullptr);
    }

    // Reference eagerly, then the backend under test eagerly and replayed from a graph. The eager run comes
    // first because capture relies on it (a backend may size scratch there, as the engine's warm-up step does).
    void check(const std::vector<OpCase>& cases) {
        for (const OpCase& c : cases) {
            SCOPED_TRACE(c.name);
            std::vector<std::vector<unsigned char>> want;
            {
                Placed ref(ref_, c);
                ref.run_reference();
                want = ref.outputs();
            }
            Placed dev(*be_, c);
            dev.run();
            expect_close(c, want, dev.outputs(), "eager");
            dev.reset();
            be_->begin_capture();
            dev.run();
            const GraphId g = be_->end_capture();
            EXPECT_GE(be_->graph_nodes(g), 1u);
            be_->replay(g);
            expect_close(c, want, dev.outputs(), "replayed");
            be_->destroy_graph(g);
        }
    }

    cpu::CpuBackend ref_{2};
    std::unique_ptr<Backend> be_;
    std::mt19937 rng_{20240601};
};

TEST_P(OpConformance, Copy) { check(copy_cases(rng_)); }
TEST_P(OpConformance, Embedding) { check(embedding_cases(rng_)); }
TEST_P(OpConformance, RmsNorm) { check(rms_norm_cases(rng_)); }
TEST_P(OpConformance, Matmul) { check(matmul_cases(rng_)); }
TEST_P(OpConformance, RopeNeox) { check(rope_cases(rng_)); }
TEST_P(OpConformance, KvWrite) { check(kv_write_cases(rng_)); }
TEST_P(OpConformance, Attention) { check(attention_cases(rng_, false)); }
TEST_P(OpConformance, SparseAttention) { check(attention_cases(rng_, true)); }
TEST_P(OpConformance, AddAndSiluMul) { check(elementwise_cases(rng_)); }
TEST_P(OpConformance, Matmuls) { check(matmuls_cases(rng_)); }
TEST_P(OpConformance, AddRmsNorm) { check(add_rms_norm_cases(rng_)); }
TEST_P(OpConformance, QkNormRopeKvWrite) { check(qk_norm_rope_kv_write_cases(rng_)); }
TEST_P(OpConformance, SiluMulMatmul) { check(silu_mul_matmul_cases(rng_)); }
TEST_P(OpConformance, GatherLast) { check(gather_last_cases(rng_)); }
TEST_P(OpConformance, Argmax) { check(argmax_cases(rng_)); }
TEST_P(OpConformance, AdvanceDecode) { check(advance_cases()); }
TEST_P(OpConformance, Dsa) { check(dsa_cases(rng_)); }

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

std::vector<std::string> registered_backends() {
    std::vector<std::string> names;
    for (const BackendInfo& b : backend_registry()) names.push_back(b.name);
    return names;
}

INSTANTIATE_TEST_SUITE_P(, OpConformance, ::testing::ValuesIn(registered_backends()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace tracelm
