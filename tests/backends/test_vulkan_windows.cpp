// Vulkan weights larger than one binding (maxStorageBufferRange) are read in windows of rows, a dispatch each
// (vulkan_backend.cpp: weight_windows). VulkanOptions::max_binding_bytes makes the limit small, so the split runs on
// small tensors here: matmul, matmuls, glu_matmul and embedding with split weights give the unsplit backend's bits
// and the CPU backend's (bit for bit for the GGML types and every embedding, within the op conformance suite's 1e-5 of
// the largest output for float matmuls). bf16 is compared with the CPU's AVX2 kernels: ctest runs these tests with
// TRACELM_ISA=avx2 (with AVX512_BF16 the CPU rounds activations to bf16, docs/cuda.md). Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "formats/quantize.h"
#ifdef TRACELM_HAVE_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#endif
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

namespace tracelm {
namespace {

#ifdef TRACELM_HAVE_VULKAN

using vulkan::VulkanBackend;
using vulkan::VulkanOptions;

// The binding limit of the split backend: the weights below take 2 to 10 windows, the activations fit one binding.
constexpr size_t kLimit = size_t{12} << 10;
constexpr int64_t kT = 9, kN = 100, kN2 = 70;

// Each op's outputs on one backend, for weights of type dt (K columns: 256 for GGML types, 264 for floats, so that
// float rows are not multiples of the offset alignment either).
struct Outputs {
    std::vector<std::vector<float>> matmul, embedding;  // embedding: bit for bit everywhere
};

class WindowedWeights {
   public:
    WindowedWeights(Backend& be, DType dt, int64_t K) : be_(be), dt_(dt), K_(K) {}
    ~WindowedWeights() {
        for (Buffer* b : bufs_) be_.free(b);
    }
    WindowedWeights(const WindowedWeights&) = delete;
    WindowedWeights& operator=(const WindowedWeights&) = delete;

    // rows x K of type dt, from row 1 of its buffer (so the tensor's offset is not 0).
    Tensor weight(const std::string& name, int64_t rows, uint32_t seed) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> nd(0.0f, 0.5f);
        std::vector<float> v(static_cast<size_t>((rows + 1) * K_));
        for (float& x : v) x = nd(rng);
        const size_t row = dtype_row_bytes(dt_, K_);
        std::vector<uint8_t> bytes(static_cast<size_t>(rows + 1) * row);
        for (int64_t r = 0; r <= rows; ++r) {
            const float* src = v.data() + r * K_;
            uint8_t* dst = bytes.data() + static_cast<size_t>(r) * row;
            if (dt_ == DType::F32) {
                std::memcpy(dst, src, row);
            } else if (dt_ == DType::F16 || dt_ == DType::BF16) {
                auto* h = reinterpret_cast<uint16_t*>(dst);
                for (int64_t k = 0; k < K_; ++k) h[k] = dt_ == DType::BF16 ? f32_to_bf16(src[k]) : f32_to_f16(src[k]);
            } else {
                quantize_row(dt_, src, K_, dst);
            }
        }
        bufs_.push_back(be_.alloc(bytes.size(), name));
        const Tensor all = whole(bufs_.back(), dt_, rows + 1, K_);
        be_.upload(all, bytes.data());
        return all.slice_rows(1, rows);
    }
    Tensor f32(const std::string& name, int64_t rows, int64_t cols, uint32_t seed) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> v(static_cast<size_t>(rows * cols));
        for (float& x : v) x = nd(rng);
        bufs_.push_back(be_.alloc(v.size() * 4, name));
        const Tensor t = whole(bufs_.back(), DType::F32, rows, cols);
        be_.upload(t, v.data());
        return t;
    }
    Tensor i32(const std::string& name, const std::vector<int32_t>& v) {
        bufs_.push_back(be_.alloc(v.size() * 4, name));
        const Tensor t = whole(bufs_.back(), DType::I32, 1, static_cast<int64_t>(v.size()));
        be_.upload(t, v.data());
        return t;
    }
    Tensor out(const std::string& name, int64_t rows, int64_t cols) {
        bufs_.push_back(be_.alloc(static_cast<size_t>(rows * cols) * 4, name));
        return whole(bufs_.back(), DType::F32, rows, cols);
    }
    std::vector<float> read(const Tensor& t) {
        std::vector<float> v(static_cast<size_t>(t.numel()));
        be_.download(t, v.data());
        return v;
    }

   private:
    Backend& be_;
    DType dt_;
    int64_t K_;
    std::vector<Buffer*> bufs_;
};

Outputs run_ops(Backend& be, DType dt) {
    const int64_t K = dtype_is_quantized(dt) ? 256 : 264;
    WindowedWeights m(be, dt, K);
    const Tensor w = m.weight("w", kN, 1), w2 = m.weight("w2", kN2, 2);
    const Tensor x = m.f32("x", kT, K, 3), bias = m.f32("bias", 1, kN, 4);
    Outputs o;
    // 9 rows (the K types' tiled order) with a bias, and one row (vec_dot's order).
    const Tensor y = m.out("y", kT, kN);
    be.matmul(x, w, &bias, y, kT);
    o.matmul.push_back(m.read(y));
    const Tensor y1 = m.out("y1", 1, kN);
    be.matmul(x.slice_rows(4, 1), w, nullptr, y1, 1);
    o.matmul.push_back(m.read(y1));
    // matmuls: the split weight and a smaller one (2 windows at most) into one x.
    const Tensor a = m.out("a", kT, kN), b = m.out("b", kT, kN2);
    const MatmulOut outs[] = {{&w2, nullptr, b}, {&w, &bias, a}};
    be.matmuls(x, outs, kT);
    o.matmul.push_back(m.read(a));
    o.matmul.push_back(m.read(b));
    // glu_matmul: glu(gate, up) . w^T.
    const Tensor gate = m.f32("gate", kT, K, 5), up = m.f32("up", kT, K, 6), g = m.out("g", kT, kN);
    be.glu_matmul(gate, up, Activation::Silu, w, g, kT);
    o.matmul.push_back(m.read(g));
    // embedding: ids in every window, the first and last rows, and ids outside the table (zero rows).
    const Tensor ids = m.i32("ids", {0, kN - 1, 57, -1, static_cast<int32_t>(kN), 13, 99, 42, 71}), e = m.out("e", kT, K);
    be.embedding(ids, w, 1.0f, e);
    o.embedding.push_back(m.read(e));
    be.embedding(ids, w, 0.5f, e);
    o.embedding.push_back(m.read(e));
    return o;
}

bool cpu_rounds_bf16_activations() {
    return cpu::active_isa() == cpu::Isa::Avx512 && cpu::cpu_features().avx512_bf16;
}

VulkanOptions split_options() {
    VulkanOptions o;
    o.max_binding_bytes = kLimit;
    return o;
}

TEST(VulkanWeightWindows, SplitWeightsGiveTheUnsplitBitsAndTheCpus) {
    if (const std::string why = vulkan::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    VulkanBackend whole_be, split_be(split_options());
    cpu::CpuBackend cpu(2);
    for (const DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
        const std::string name(dtype_name(dt));
        const Outputs whole_o = run_ops(whole_be, dt), split_o = run_ops(split_be, dt), want = run_ops(cpu, dt);
        EXPECT_EQ(split_o.matmul, whole_o.matmul) << name;
        EXPECT_EQ(split_o.embedding, whole_o.embedding) << name;
        if (dt == DType::BF16 && cpu_rounds_bf16_activations()) {
            ADD_FAILURE() << "bf16 against the CPU needs TRACELM_ISA=avx2 (ctest sets it): here the CPU rounds "
                             "activations to bf16";
            continue;
        }
        EXPECT_EQ(split_o.embedding, want.embedding) << name;
        ASSERT_EQ(split_o.matmul.size(), want.matmul.size());
        for (size_t i = 0; i < want.matmul.size(); ++i) {
            if (dtype_is_quantized(dt)) {
                EXPECT_EQ(split_o.matmul[i], want.matmul[i]) << name << " product " << i;
                continue;
            }
            float scale = 0.0f, err = 0.0f;
            for (size_t j = 0; j < want.matmul[i].size(); ++j) {
                scale = std::max(scale, std::abs(want.matmul[i][j]));
                err = std::max(err, std::abs(want.matmul[i][j] - split_o.matmul[i][j]));
            }
            EXPECT_LE(err, 1e-5f * scale) << name << " product " << i;
        }
    }
}

// The split is real and valid: an f32 weight of 101 rows of 1056 bytes takes 10 windows of 11 rows under the 12 KiB
// limit, one dispatch each, which a recorded command buffer replays to the eager bits; with the validation layer on
// (synchronization validation too), the windows' offsets, ranges and barriers, and a split Q6_K matmul and embedding
// (rows of 210 bytes: windows that start off the offset alignment), draw no message.
TEST(VulkanWeightWindows, AWeightPastTheLimitTakesOneDispatchPerWindow) {
    if (const std::string why = vulkan::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
#ifdef __SANITIZE_ADDRESS__
    // The validation layer's own leaks, as in test_vulkan.cpp's ValidationLayerReportsNothing.
    __lsan_disable();
#endif
    VulkanOptions options = split_options();
    options.validation = true;
    std::vector<std::string> messages;
    {
        VulkanBackend be(options);
        WindowedWeights m(be, DType::F32, 264);
        const Tensor w = m.weight("w", kN, 1), x = m.f32("x", kT, 264, 3), y = m.out("y", kT, kN);
        be.matmul(x, w, nullptr, y, kT);
        const std::vector<float> eager = m.read(y);
        be.begin_capture();
        be.matmul(x, w, nullptr, y, kT);
        const GraphId g = be.end_capture();
        EXPECT_EQ(be.graph_nodes(g), 10u);
        be.replay(g);
        EXPECT_EQ(m.read(y), eager);
        be.destroy_graph(g);
        WindowedWeights q(be, DType::Q6_K, 256);
        const Tensor wq = q.weight("wq", kN, 1), xq = q.f32("xq", kT, 256, 3), yq = q.out("yq", kT, kN);
        be.matmul(xq, wq, nullptr, yq, kT);
        const Tensor ids = q.i32("ids", {0, kN - 1, 57, -1, 13}), e = q.out("e", 5, 256);
        be.embedding(ids, wq, 1.0f, e);
        be.synchronize();
        messages = be.validation_messages();
    }
#ifdef __SANITIZE_ADDRESS__
    __lsan_enable();
#endif
    EXPECT_TRUE(messages.empty()) << messages.size() << " messages, the first: " << messages.front();
}

// Activations and KV caches are bound whole: one past the limit is refused by the op, naming it and the buffer.
TEST(VulkanWeightWindows, AnActivationPastTheLimitIsRefusedByName) {
    if (const std::string why = vulkan::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    VulkanBackend be(split_options());
    WindowedWeights m(be, DType::F32, 264);
    const Tensor big = m.out("big.activation", 2 * static_cast<int64_t>(kLimit) / 4, 1);
    try {
        be.add(big, big, big);
        be.synchronize();
        ADD_FAILURE() << "add ran over a buffer past the binding limit";
    } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("vulkan add: 'big.activation' has 24576 bytes, more than"), std::string::npos) << what;
        EXPECT_NE(what.find("not activations or KV caches"), std::string::npos) << what;
    }
}

#else

TEST(VulkanWeightWindows, SkipsWhenBuiltWithoutVulkan) {
    GTEST_SKIP() << "built without Vulkan (TRACELM_VULKAN=OFF or no libvulkan-dev / glslc)";
}

#endif

}  // namespace
}  // namespace tracelm
