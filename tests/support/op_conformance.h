// The op conformance harness (tests/ops/test_<family>.cpp, one file per op family of docs/architecture.md):
// every op of the Backend interface, on every backend of the registry, against the CPU backend (the reference,
// itself checked against the references of src/ops/<family>/ in the same files). Random inputs go
// through the reference eagerly, then through the backend under test eagerly and once more captured into a graph
// and replayed. Float outputs must agree within a relative bound (summation order may differ between backends),
// infinities exactly; integer outputs (ids, indices, decode state) exactly. Fused ops are held to the reference
// running the ops they fuse, one after the other.
//
// The backend list comes from backends/registry.h, so a new backend is covered once it registers. A backend
// this process cannot use (not built, no device) skips with the reason, and so does an op it does not run yet
// (NotImplemented); the "cpu" instance compares the CPU
// backend's captured replay with its eager run, so the suite means something on machines without a GPU.
// The suite is instantiated once, over the registry, in tests/ops/test_op_conformance.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/registry.h"
#include "formats/quantize.h"
#include "ops/dsa/dsa_topk.h"
#include "ops/sampling/sampling.h"

namespace tracelm::conformance {

// A tensor an op touches, with its contents before the op.
struct HostTensor {
    std::string name;
    DType dtype;
    int64_t rows, cols;
    std::vector<unsigned char> bytes;
};

template <typename T>
inline HostTensor host(const std::string& name, DType dt, int64_t rows, int64_t cols, const std::vector<T>& v) {
    HostTensor h{name, dt, rows, cols, std::vector<unsigned char>(v.size() * sizeof(T))};
    std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
    return h;
}
inline HostTensor f32(const std::string& n, int64_t r, int64_t c, const std::vector<float>& v) { return host(n, DType::F32, r, c, v); }
inline HostTensor i32(const std::string& n, int64_t r, int64_t c, const std::vector<int32_t>& v) { return host(n, DType::I32, r, c, v); }
inline HostTensor i64(const std::string& n, int64_t r, int64_t c, const std::vector<int64_t>& v) { return host(n, DType::I64, r, c, v); }
// Weights in f32, bf16 or f16 (values rounded to the type).
inline HostTensor weight(const std::string& n, DType dt, int64_t r, int64_t c, const std::vector<float>& v) {
    if (dt == DType::F32) return f32(n, r, c, v);
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
    return host(n, dt, r, c, h);
}

// GGML's block types, each on the backends that run them (the CPU backend runs all).
constexpr DType kBlockTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                 DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Rows of GGML blocks: v quantized where quantize_row writes the type, otherwise random blocks (quants and high bits
// random, d and m small normal values as f16), which are as good a test of a dot product.
inline HostTensor block_weight(const std::string& n, DType dt, int64_t r, int64_t c, const std::vector<float>& v,
                               std::mt19937& rng) {
    const size_t row = dtype_row_bytes(dt, c), bb = dtype_block_bytes(dt);
    std::vector<uint8_t> b(static_cast<size_t>(r) * row);
    if (can_quantize_to(dt)) {
        for (int64_t i = 0; i < r; ++i) quantize_row(dt, v.data() + i * c, c, b.data() + static_cast<size_t>(i) * row);
        return host(n, dt, r, c, b);
    }
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> scale(0.0f, 0.02f);
    for (uint8_t& x : b) x = static_cast<uint8_t>(byte(rng));
    // The f16 fields: d, and m (Q4_1, Q5_1) or dmin (Q4_K, Q5_K) after it; Q6_K's d is last.
    const bool has_m = dt == DType::Q4_1 || dt == DType::Q5_1 || dt == DType::Q4_K || dt == DType::Q5_K;
    const size_t d_at = dt == DType::Q6_K ? bb - 2 : 0;
    for (size_t at = 0; at < b.size(); at += bb) {
        for (int f = 0; f < (has_m ? 2 : 1); ++f) {
            const uint16_t h = f32_to_f16(scale(rng));
            std::memcpy(b.data() + at + d_at + 2 * f, &h, 2);
        }
    }
    return host(n, dt, r, c, b);
}

// What an op sees on one backend: its tensors (in the case's order), a dsa_topk and a sample workspace.
struct Bound {
    std::vector<Tensor> t;
    DsaTopkWorkspace ws;
    SamplingWorkspace sample_ws;
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

constexpr int64_t kWsRows = 8, kWsKeys = 1024, kWsVocab = 4096;

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
        bound_.sample_ws = sampling::make_workspace(be, kWsRows, kWsVocab);
        buffers_.push_back(bound_.sample_ws.buffer);
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

inline std::vector<float> as_floats(const std::vector<unsigned char>& b) {
    std::vector<float> f(b.size() / sizeof(float));
    std::memcpy(f.data(), b.data(), b.size());
    return f;
}

inline void expect_close(const OpCase& c, const std::vector<std::vector<unsigned char>>& want,
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
            // Infinities (masked logits, logprobs padding) must be equal, and stay out of the bound's scale.
            if (std::isinf(w[i]) || std::isinf(g[i])) {
                EXPECT_EQ(g[i], w[i]) << where << " element " << i;
                continue;
            }
            scale = std::max(scale, std::abs(static_cast<double>(w[i])));
            const double e = std::abs(static_cast<double>(g[i]) - w[i]);
            if (e > err) err = e, worst = i;
        }
        EXPECT_LE(err, c.rel_tol * std::max(scale, 1e-30))
            << where << ": worst element " << worst << " got " << g[worst] << " want " << w[worst];
    }
}

inline std::vector<float> randn(std::mt19937& rng, size_t n, float sigma = 1.0f) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

constexpr double kElementwise = 1e-6;  // one rounding, or exp/sin/cos at a few ulp
constexpr double kReduction = 1e-5;    // sums over up to a few thousand terms in another order

constexpr DType kWeightTypes[] = {DType::F32, DType::BF16, DType::F16};
inline std::string dt(DType d) { return std::string(dtype_name(d)); }

// Paged attention geometry: GQA 4:2, head_dim 64, 4-token blocks scattered over a 128-block pool.
struct AttnCase {
    std::string name;
    std::vector<int32_t> seq_lens, q_lens;
    int max_blocks;
    int window;  // dense attention also runs with this sliding window
};

inline std::vector<OpCase> attention_cases(std::mt19937& rng, bool sparse) {
    const int H = 4, KV = 2, hd = 64, bs = 4, num_blocks = 128;
    const std::vector<AttnCase> shapes = {
        // A prefill chunk after earlier context, and a second sequence starting from scratch.
        {"prefill", {11, 7}, {3, 7}, 6, 5},
        // Decode: one new token per sequence over long contexts (the split path on a GPU), plus a padded row
        // (length 0, no blocks) as a batch bucket makes.
        {"decode", {301, 64, 0}, {1, 1, 1}, 100, 50},
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
        for (const int window : sparse ? std::vector<int>{0} : std::vector<int>{0, s.window}) {
            const std::string name = std::string(sparse ? "sparse_attention " : "attention ") + s.name +
                                     (window > 0 ? " window " + std::to_string(window) : "");
            out.push_back({name, ts, {6}, kReduction, [S, sparse, window](Backend& be, const Bound& b) {
                               AttentionMeta meta{b.t[3], b.t[4], b.t[5], S, bs};
                               meta.window = window;
                               const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
                               if (sparse) {
                                   be.sparse_attention(b.t[0], b.t[1], b.t[2], meta, b.t[7], H, KV, hd, scale, b.t[6]);
                               } else {
                                   be.attention(b.t[0], b.t[1], b.t[2], meta, H, KV, hd, scale, b.t[6]);
                               }
                           }});
        }
    }
    return out;
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
            try {
                dev.run();
            } catch (const NotImplemented& e) {
                GTEST_SKIP() << e.what();
            }
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

inline std::vector<std::string> registered_backends() {
    std::vector<std::string> names;
    for (const BackendInfo& b : backend_registry()) names.push_back(b.name);
    return names;
}

}  // namespace tracelm::conformance
