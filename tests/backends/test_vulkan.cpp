// The Vulkan backend beyond the op conformance suite (tests/ops): a recorded command buffer replays what the ops
// computed eagerly bit for bit, the validation layer reports nothing while the backend works, and the capture
// contract's errors name the op and buffer. Without a Vulkan device (or a build without Vulkan) the tests skip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "formats/quantize.h"
#include "ops/dsa/dsa_topk.h"
#include "support/dsa_topk_fuzz.h"
#include "support/sampling_support.h"
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

void require_device() {
    const std::string why = vulkan::unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << why;
}

// A decode step of a one-layer model in miniature (H = 128, vocab 300, 4 heads of 32): embedding, norm, q
// projection (Q4_0) with RoPE, SwiGLU MLP with f16, bf16 and Q8_0 weights plus a Q4_K projection of up added to its
// output, residual add + norm, logits and argmax.
class Step {
   public:
    static constexpr int64_t H = 128, I = 256, V = 300, S = 2;

    explicit Step(Backend& be) : be_(be) {
        std::mt19937 rng(7);
        std::normal_distribution<float> nd(0.0f, 0.5f);
        const auto randn = [&](size_t n) {
            std::vector<float> v(n);
            for (float& x : v) x = nd(rng);
            return v;
        };
        table_ = put("table", DType::F32, V, H, randn(V * H));
        norm_ = put("norm", DType::F32, 1, H, randn(H));
        wq_ = put_quant("wq", DType::Q4_0, H, H, randn(H * H));
        gate_w_ = put_f16("gate_w", I, H, randn(I * H), false);
        up_w_ = put_f16("up_w", I, H, randn(I * H), true);
        down_w_ = put_quant("down_w", DType::Q8_0, H, I, randn(H * I));
        k_w_ = put_quant("k_w", DType::Q4_K, H, I, randn(H * I));
        head_ = put("head", DType::F32, V, H, randn(V * H));
        ids_ = put_i32("ids", {17, 255});
        pos_ = put_i32("pos", {3, 1000});
        x_ = scratch("x", S, H);
        xn_ = scratch("xn", S, H);
        q_ = scratch("q", S, H);
        gate_ = scratch("gate", S, I);
        up_ = scratch("up", S, I);
        down_ = scratch("down", S, H);
        extra_ = scratch("extra", S, H);
        logits_ = scratch("logits", S, V);
        next_ = whole(be.alloc(S * 4, "next"), DType::I32, 1, S);
    }
    ~Step() {
        for (Buffer* b : buffers_) be_.free(b);
        be_.free(next_.buf);
    }
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;

    void run() {
        be_.embedding(ids_, table_, 1.0f, x_);
        be_.rms_norm(x_, norm_, 1e-6f, xn_);
        be_.matmul(xn_, wq_, nullptr, q_);
        be_.rope_neox(q_, pos_, 4, 32, RopeSpec{1e6f, {}});
        be_.add(x_, q_, x_);
        be_.rms_norm(x_, norm_, 1e-6f, xn_);
        be_.matmul(xn_, gate_w_, nullptr, gate_);
        be_.matmul(xn_, up_w_, nullptr, up_);
        be_.matmul(up_, k_w_, nullptr, extra_);
        be_.glu_matmul(gate_, up_, Activation::Silu, down_w_, down_);
        be_.add(down_, extra_, down_);
        be_.add_rms_norm(x_, down_, norm_, 1e-6f, xn_);
        be_.matmul(xn_, head_, nullptr, logits_);
        be_.argmax(logits_, next_);
    }
    // The step's outputs as bytes: the logits and the argmax ids.
    std::vector<unsigned char> outputs() {
        std::vector<unsigned char> out(logits_.nbytes() + next_.nbytes());
        be_.download(logits_, out.data());
        be_.download(next_, out.data() + logits_.nbytes());
        return out;
    }
    const Tensor& ids() const { return ids_; }

   private:
    Tensor put(const std::string& name, DType dt, int64_t rows, int64_t cols, const std::vector<float>& v) {
        Buffer* b = be_.alloc(v.size() * 4, name);
        buffers_.push_back(b);
        const Tensor t = whole(b, dt, rows, cols);
        be_.upload(t, v.data());
        return t;
    }
    Tensor put_f16(const std::string& name, int64_t rows, int64_t cols, const std::vector<float>& v, bool bf16) {
        std::vector<uint16_t> h(v.size());
        for (size_t i = 0; i < v.size(); ++i) h[i] = bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
        Buffer* b = be_.alloc(h.size() * 2, name);
        buffers_.push_back(b);
        const Tensor t = whole(b, bf16 ? DType::BF16 : DType::F16, rows, cols);
        be_.upload(t, h.data());
        return t;
    }
    Tensor put_quant(const std::string& name, DType dt, int64_t rows, int64_t cols, const std::vector<float>& v) {
        std::vector<uint8_t> q(static_cast<size_t>(rows) * dtype_row_bytes(dt, cols));
        for (int64_t r = 0; r < rows; ++r) quantize_row(dt, v.data() + r * cols, cols, q.data() + r * dtype_row_bytes(dt, cols));
        Buffer* b = be_.alloc(q.size(), name);
        buffers_.push_back(b);
        const Tensor t = whole(b, dt, rows, cols);
        be_.upload(t, q.data());
        return t;
    }
    Tensor put_i32(const std::string& name, const std::vector<int32_t>& v) {
        Buffer* b = be_.alloc(v.size() * 4, name);
        buffers_.push_back(b);
        const Tensor t = whole(b, DType::I32, 1, static_cast<int64_t>(v.size()));
        be_.upload(t, v.data());
        return t;
    }
    Tensor scratch(const std::string& name, int64_t rows, int64_t cols) {
        Buffer* b = be_.alloc(static_cast<size_t>(rows * cols) * 4, name);
        buffers_.push_back(b);
        return whole(b, DType::F32, rows, cols);
    }

    Backend& be_;
    std::vector<Buffer*> buffers_;
    Tensor table_, norm_, wq_, gate_w_, up_w_, down_w_, k_w_, head_, ids_, pos_, x_, xn_, q_, gate_, up_, down_, extra_,
        logits_, next_;
};

// The step recorded once and submitted again gives the eager step's bytes, also after its inputs change between
// submissions (as a decode step's do).
TEST(VulkanBackend, ReplayedCommandBufferEqualsEagerBitForBit) {
    require_device();
    VulkanBackend be;
    Step step(be);
    step.run();
    const std::vector<unsigned char> eager = step.outputs();
    be.begin_capture();
    step.run();
    const GraphId g = be.end_capture();
    // One dispatch per op; two for glu_matmul (glu, then matmul) and for a quantized matmul (x to Q8_0 or Q8_K, then
    // the product): 14 ops, 18 dispatches.
    EXPECT_EQ(be.graph_nodes(g), 18u);
    for (int rep = 0; rep < 3; ++rep) {
        be.replay(g);
        EXPECT_EQ(step.outputs(), eager) << "replay " << rep;
    }
    const std::vector<int32_t> other = {3, 299};
    be.upload(step.ids(), other.data());
    step.run();
    const std::vector<unsigned char> eager_other = step.outputs();
    EXPECT_NE(eager_other, eager);
    be.upload(step.ids(), std::vector<int32_t>{17, 255}.data());
    be.replay(g);
    EXPECT_EQ(step.outputs(), eager);
    be.upload(step.ids(), other.data());
    be.replay(g);
    EXPECT_EQ(step.outputs(), eager_other);
    be.destroy_graph(g);
}

// The ops Step leaves out, eagerly and captured: copy, kv_write into f16 and f32 caches, attention and
// sparse_attention, gather_last, dsa_topk and dsa_topk_causal, kv_slots, adjust_logits, sample and advance_decode
// (their results are the op conformance suite's business; here only what the layer says).
void state_ops(Backend& be) {
    std::vector<Buffer*> bufs;
    const auto t = [&](const std::string& name, DType dt, int64_t rows, int64_t cols) {
        bufs.push_back(be.alloc(static_cast<size_t>(rows) * dtype_row_bytes(dt, cols), name));
        return whole(bufs.back(), dt, rows, cols);
    };
    const Tensor k = t("k", DType::F32, 2, 64), v = t("v", DType::F32, 2, 64), kc = t("kc", DType::F16, 8, 64),
                 vc = t("vc", DType::F16, 8, 64), slots = t("slots", DType::I32, 1, 2), qsl = t("qsl", DType::I32, 1, 3),
                 last = t("last", DType::F32, 2, 64), ids = t("ids", DType::I32, 1, 2), pos = t("pos", DType::I32, 1, 2),
                 lens = t("lens", DType::I32, 1, 2), tables = t("tables", DType::I32, 2, 2), step = t("step", DType::I32, 1, 1),
                 history = t("history", DType::I32, 4, 2), kc32 = t("kc32", DType::F32, 8, 64),
                 vc32 = t("vc32", DType::F32, 8, 64), aq = t("aq", DType::F32, 2, 128),
                 att = t("att", DType::F32, 2, 128), picks = t("picks", DType::I64, 2, 3),
                 wstart = t("wstart", DType::I64, 1, 2), wend = t("wend", DType::I64, 1, 2), top = t("top", DType::I64, 2, 5);
    const DsaTopkWorkspace topk_ws = dsa::make_topk_workspace(be, 2, 64);
    bufs.push_back(topk_ws.buffer);
    be.upload(wstart, std::vector<int64_t>{0, 3}.data());
    be.upload(wend, std::vector<int64_t>{64, 40}.data());
    be.upload(slots, std::vector<int32_t>{1, 6}.data());
    be.upload(qsl, std::vector<int32_t>{0, 1, 2}.data());
    be.upload(tables, std::vector<int32_t>{0, 1, 2, 3}.data());
    be.upload(lens, std::vector<int32_t>{3, 5}.data());
    be.upload(picks, std::vector<int64_t>{0, 2, -1, 1, 4, 9}.data());
    // Sampling over `last` as logits: rows 0 greedy with logprobs, 1 drawn with top-k, top-p and penalties; biased
    // and masked first.
    sampling::RowParams drawn = testing::params(1.0f, 5, 0.9f, 0.0f, 3);
    drawn.repetition_penalty = 1.2f;
    sampling::RowParams greedy;
    greedy.logprobs = 3;
    const std::vector<sampling::RowParams> row_params = {greedy, drawn};
    SamplingIo sio{t("params", DType::I32, 2, sampling::kParamWords), t("counts", DType::I32, 2, 64), step, 0,
                   t("logprobs", DType::F32, 2, 1 + sampling::kMaxLogprobs),
                   t("top_ids", DType::I32, 2, sampling::kMaxLogprobs), sampling::make_workspace(be, 2, 64)};
    bufs.push_back(sio.ws.buffer);
    const LogitAdjustIo aio{t("flags", DType::I32, 2, 2), t("mask", DType::I32, 2, 2),
                            t("bias_ids", DType::I32, 2, sampling::kMaxLogitBias),
                            t("bias_values", DType::F32, 2, sampling::kMaxLogitBias)};
    be.upload(sio.params, row_params.data());
    be.upload(aio.flags, std::vector<int32_t>{1, 2, 0, 1}.data());
    be.upload(aio.mask, std::vector<uint32_t>{0xf0f0f0f0u, 0x0f0f0f0fu, ~0u, ~0u}.data());
    DecodeState st;
    st.token_ids = ids;
    st.positions = pos;
    st.slot_mapping = slots;
    st.seq_lens = lens;
    st.block_tables = tables;
    st.step = step;
    st.history = history;
    st.block_size = 4;
    const auto ops = [&] {
        be.copy(v, k);
        be.kv_write(k, v, slots, kc, vc);
        be.kv_write(k, v, slots, kc32, vc32);
        // Two sequences of one token each over 4-token blocks, 2 query heads of 64 on the caches' one.
        be.attention(aq, kc32, vc32, AttentionMeta{tables, lens, qsl, 2, 4}, 2, 1, 64, 0.125f, att);
        be.sparse_attention(aq, kc32, vc32, AttentionMeta{tables, lens, qsl, 2, 4}, picks, 2, 1, 64, 0.125f, att);
        be.gather_last(k, qsl, last);
        be.dsa_topk(last, wstart, wend, topk_ws, top);
        be.dsa_topk_causal(last, AttentionMeta{tables, lens, qsl, 2, 4}, topk_ws, top);
        be.kv_slots(pos, tables, 4, slots);
        be.adjust_logits(last, aio);
        be.sample(last, sio, ids);
        be.advance_decode(ids, st);
    };
    ops();
    be.begin_capture();
    ops();
    const GraphId g = be.end_capture();
    be.replay(g);
    be.replay(g);
    be.synchronize();
    be.destroy_graph(g);
    for (Buffer* b : bufs) be.free(b);
}

// VK_LAYER_KHRONOS_validation, with synchronization validation, watches allocation, uploads, every op with a shader
// eagerly, captured and replayed, and frees, and reports nothing (any warning or error fails the test and is printed).
TEST(VulkanBackend, ValidationLayerReportsNothing) {
    require_device();
#ifdef __SANITIZE_ADDRESS__
    // Debian 12's validation layer (1.3.239) leaks state of the objects it tracks (reference cycles, ~115 kB); the
    // ASan stage's LeakSanitizer would fail on them, so what this thread allocates while the layer runs is not
    // tracked. The backend's own allocations are leak-checked by the other tests, which run without the layer.
    __lsan_disable();
#endif
    VulkanOptions options;
    options.validation = true;
    std::vector<std::string> messages;
    {
        VulkanBackend be(options);
        {
            Step step(be);
            step.run();
            const auto eager = step.outputs();
            be.begin_capture();
            step.run();
            const GraphId g = be.end_capture();
            be.replay(g);
            be.replay(g);
            EXPECT_EQ(step.outputs(), eager);
            be.destroy_graph(g);
        }
        state_ops(be);
        be.synchronize();
        messages = be.validation_messages();
    }
#ifdef __SANITIZE_ADDRESS__
    __lsan_enable();
#endif
    for (const std::string& m : messages) ADD_FAILURE() << m;
}

// Inside a recording, host transfers, allocation, free and waits fail with the op and buffer named, and the
// recording stays usable.
TEST(VulkanBackend, HostActionsInsideCaptureNameTheOpAndBuffer) {
    require_device();
    VulkanBackend be;
    Buffer* b = be.alloc(64, "step.inputs");
    const Tensor t = whole(b, DType::F32, 1, 16);
    const std::vector<float> host(16, 1.0f);
    std::vector<float> back(16);
    be.begin_capture();
    const auto message = [](auto&& f) {
        try {
            f();
        } catch (const CaptureViolation& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(message([&] { be.upload(t, host.data()); }), "capture violation: upload of 'step.inputs' inside captured region");
    EXPECT_EQ(message([&] { be.download(t, back.data()); }),
              "capture violation: download of 'step.inputs' inside captured region");
    EXPECT_EQ(message([&] { be.alloc(4, "late"); }), "capture violation: alloc of 'late' inside captured region");
    EXPECT_EQ(message([&] { be.free(b); }), "capture violation: free of 'step.inputs' inside captured region");
    EXPECT_EQ(message([&] { be.synchronize(); }), "capture violation: synchronize inside captured region");
    be.add(t, t, t);
    const GraphId g = be.end_capture();
    be.upload(t, host.data());
    be.replay(g);
    be.download(t, back.data());
    EXPECT_EQ(back, std::vector<float>(16, 2.0f));
    be.destroy_graph(g);
    be.free(b);
}

// Attention over f16 caches reads f16 and sums in f32 (this backend's numbers; the CPU's follow llama.cpp's), so caches
// of f16-exact values give the f32 caches' result bit for bit: dense (also windowed) and sparse, prefill and decode
// rows.
TEST(VulkanBackend, F16CachesAttendAsF32CachesOfTheSameValues) {
    require_device();
    VulkanBackend be;
    const int H = 4, KV = 2, hd = 64, slots = 64, T = 4;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> kv(static_cast<size_t>(slots) * KV * hd * 2), q(static_cast<size_t>(T) * H * hd);
    std::vector<uint16_t> kv16(kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
        kv16[i] = f32_to_f16(nd(rng));
        kv[i] = f16_to_f32(kv16[i]);
    }
    for (float& x : q) x = nd(rng);
    std::vector<Buffer*> bufs;
    const auto put = [&](const std::string& name, DType dt, int64_t rows, int64_t cols, const void* data) {
        bufs.push_back(be.alloc(static_cast<size_t>(rows) * dtype_row_bytes(dt, cols), name));
        const Tensor t = whole(bufs.back(), dt, rows, cols);
        be.upload(t, data);
        return t;
    };
    const size_t half = kv.size() / 2;
    const Tensor k32 = put("k32", DType::F32, slots, KV * hd, kv.data()), v32 = put("v32", DType::F32, slots, KV * hd, kv.data() + half);
    const Tensor k16 = put("k16", DType::F16, slots, KV * hd, kv16.data()), v16 = put("v16", DType::F16, slots, KV * hd, kv16.data() + half);
    // A prefill of 3 rows after 20 cached tokens, and a decode row of 37 tokens; 8-token blocks.
    const std::vector<int32_t> tables = {0, 1, 2, -1, 4, 5, 6, 7}, lens = {23, 37}, qsl = {0, 3, 4};
    const std::vector<int64_t> picks = {0, 5, 9, -1, 21, 22, 1, 2, 3, 4, 30, 36, 3, 8, 17, 19};
    const Tensor qt = put("q", DType::F32, T, H * hd, q.data()), bt = put("bt", DType::I32, 2, 4, tables.data());
    const Tensor lt = put("lens", DType::I32, 1, 2, lens.data()), st = put("qsl", DType::I32, 1, 3, qsl.data());
    const Tensor it = put("picks", DType::I64, T, 4, picks.data());
    const std::vector<float> zeros(static_cast<size_t>(T) * H * hd);
    const Tensor o32 = put("o32", DType::F32, T, H * hd, zeros.data()), o16 = put("o16", DType::F32, T, H * hd, zeros.data());
    for (const int window : {0, 6}) {
        for (const bool sparse : {false, true}) {
            if (sparse && window > 0) continue;  // sparse attention takes no window
            AttentionMeta meta{bt, lt, st, 2, 8};
            meta.window = window;
            for (const auto& [k, v, o] : {std::tuple{k32, v32, o32}, std::tuple{k16, v16, o16}}) {
                if (sparse) {
                    be.sparse_attention(qt, k, v, meta, it, H, KV, hd, 0.125f, o);
                } else {
                    be.attention(qt, k, v, meta, H, KV, hd, 0.125f, o);
                }
            }
            std::vector<float> a(zeros.size()), b(zeros.size());
            be.download(o32, a.data());
            be.download(o16, b.data());
            EXPECT_EQ(a, b) << "window " << window << (sparse ? " sparse" : "");
            EXPECT_NE(a, zeros);
        }
    }
    for (Buffer* b : bufs) be.free(b);
}

// A transfer larger than the staging buffer (64 MiB) goes through it in pieces, at the tensor's offset.
TEST(VulkanBackend, TransfersLargerThanTheStagingBufferArriveWhole) {
    require_device();
    VulkanBackend be;
    const int64_t n = (int64_t{65} << 20) / 4 + 3;  // a little over 65 MiB of f32
    Buffer* b = be.alloc(static_cast<size_t>(n + 5) * 4, "big");
    const Tensor t = whole(b, DType::F32, n + 5, 1).slice_rows(5, n);
    std::vector<float> host(static_cast<size_t>(n));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 1000003);
    be.upload(t, host.data());
    std::vector<float> back(host.size());
    be.download(t, back.data());
    EXPECT_EQ(back, host);
    std::vector<float> head(5, -1.0f);
    be.download(whole(b, DType::F32, 5, 1), head.data());
    EXPECT_EQ(head, std::vector<float>(5, 0.0f));  // zeroed at alloc, untouched
    be.free(b);
}

TEST(VulkanBackend, NamesAMissingDevice) {
    require_device();
    VulkanOptions options;
    options.device = 99;
    try {
        VulkanBackend be(options);
        ADD_FAILURE() << "made a backend on device 99";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("no Vulkan device 99"), std::string::npos) << e.what();
    }
}

// The host waits for the device at most wait_timeout_s: work still running then (here a 16 x 2048 x 2048 matmul
// against a limit of 0) is an error naming the device, where a hung device would otherwise hang the host. A lost
// device's VK_ERROR_DEVICE_LOST takes the same path; lavapipe cannot lose one.
TEST(VulkanBackend, WorkPastTheWaitTimeoutIsAnErrorNotAHang) {
    require_device();
    VulkanOptions options;
    options.wait_timeout_s = 0.0;
    VulkanBackend be(options);
    // Allocated, not uploaded (an upload waits); the backend frees them when it goes.
    const Tensor x = whole(be.alloc(16 * 2048 * 4, "x"), DType::F32, 16, 2048);
    const Tensor w = whole(be.alloc(2048 * 2048 * 4, "w"), DType::F32, 2048, 2048);
    const Tensor out = whole(be.alloc(16 * 2048 * 4, "out"), DType::F32, 16, 2048);
    be.matmul(x, w, nullptr, out);
    try {
        be.synchronize();
        ADD_FAILURE() << "synchronize returned before the matmul could have run";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("did not finish its work within 0 ms (hung or lost)"), std::string::npos)
            << e.what();
    }
}

// Seeded sampling gives the CPU backend's ids: 16 rows of 5003 logits (ties, NaN, +inf, masked and biased rows) under
// every setting, over 4 steps, eagerly and replayed from one recorded adjust_logits + sample. Ids, top ids, counts
// and the penalised logits equal the CPU's exactly; logprobs within 2e-6 (exp and log are this shader's own, in f64).
TEST(VulkanBackend, SeededSamplingGivesTheCpuBackendsIds) {
    require_device();
    using testing::params;
    using sampling::RowParams;
    const int64_t R = 16, V = 5003, W = sampling::mask_words(V), B = sampling::kMaxLogitBias;
    VulkanBackend be;
    cpu::CpuBackend cpu(2);
    testing::SampleOp want(cpu, R, V), eager(be, R, V), replayed(be, R, V);
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(R * V));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = i % 3 == 0 ? std::round(nd(rng)) : nd(rng);
    const float inf = std::numeric_limits<float>::infinity();
    logits[5] = std::numeric_limits<float>::quiet_NaN();
    logits[static_cast<size_t>(14 * V + 7)] = logits[static_cast<size_t>(14 * V + 4000)] = inf;
    std::vector<RowParams> ps;
    for (int64_t r = 0; r < R; ++r) {
        const float t = r % 4 == 0 ? 0.0f : 0.5f + 0.25f * static_cast<float>(r % 5);
        const int k = r % 3 == 1 ? static_cast<int>(1 + r * 7) : 0;
        const float top_p = r % 5 == 2 ? 0.6f + 0.05f * static_cast<float>(r % 7) : 1.0f;
        const float min_p = r % 6 == 3 ? 0.02f * static_cast<float>(r) : 0.0f;
        ps.push_back(params(t, k, top_p, min_p, 1000 + static_cast<uint64_t>(r) * 77777777ull));
        ps.back().logprobs = r % 2 == 0 ? static_cast<int32_t>(r % 21) : -1;
        ps.back().draw_base = static_cast<int32_t>(r) - 5;
    }
    ps[1].repetition_penalty = 1.3f;
    ps[5].presence_penalty = 0.7f;
    ps[5].frequency_penalty = 0.3f;
    ps[9].repetition_penalty = 0.9f;
    ps[9].frequency_penalty = -0.2f;
    ps[11].forced = 1 + 4321;
    ps[13].top_k = 0;
    ps[13].top_p = 0.999f;  // widens its selection to (nearly) every token
    std::vector<int32_t> counts(static_cast<size_t>(R * V), 0);
    for (int i = 0; i < 4000; ++i) counts[rng() % counts.size()] = (rng() % 2 ? sampling::kPromptBit : 0) | (rng() % 4);
    // Rows 3 and 6 masked to about a quarter of the vocabulary, rows 6 and 7 biased.
    std::vector<int32_t> flags(static_cast<size_t>(2 * R), 0);
    flags[6] = flags[12] = 1;
    flags[13] = 5;
    flags[15] = static_cast<int32_t>(B);
    std::vector<uint32_t> masks(static_cast<size_t>(R * W));
    for (uint32_t& m : masks) m = rng() & rng();
    std::vector<int32_t> bias_ids(static_cast<size_t>(R * B));
    std::vector<float> bias_values(bias_ids.size());
    for (size_t i = 0; i < bias_ids.size(); ++i) {
        bias_ids[i] = static_cast<int32_t>(rng() % V);
        bias_values[i] = static_cast<float>(static_cast<int>(rng() % 21) - 10);
    }
    for (testing::SampleOp* op : {&want, &eager, &replayed}) {
        op->set(logits, ps, counts, 0);
        op->set_adjust(flags, masks, bias_ids, bias_values);
    }
    replayed.capture();
    for (int32_t step = 0; step < 4; ++step) {
        SCOPED_TRACE(::testing::Message() << "step " << step);
        for (testing::SampleOp* op : {&want, &eager, &replayed}) op->set_logits(logits, step);
        const std::vector<int32_t> ids = want.run();
        eager.run();
        replayed.replay();
        for (testing::SampleOp* op : {&eager, &replayed}) {
            EXPECT_EQ(op->ids(), ids);
            EXPECT_EQ(op->top_ids(), want.top_ids());
            EXPECT_EQ(op->counts(), want.counts());
            const std::vector<float> got = op->logits(), ref = want.logits();
            EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.size() * 4), 0);
            const std::vector<float> lp = op->logprobs(), ref_lp = want.logprobs();
            for (size_t i = 0; i < lp.size(); ++i) {
                if (std::isinf(ref_lp[i])) {
                    EXPECT_EQ(lp[i], ref_lp[i]) << i;
                } else {
                    EXPECT_NEAR(lp[i], ref_lp[i], 2e-6) << i;
                }
            }
        }
    }
}

// A top-p over a flat distribution widens its selection to every one of 70001 tokens: past what one invocation's
// loop may run on lavapipe (65535 steps), which the walks' chunking keeps them under. The CPU's ids, 2 steps.
TEST(VulkanBackend, TopPWidenedToTheWholeVocabularyGivesTheCpusIds) {
    require_device();
    using testing::params;
    const int64_t R = 2, V = 70001;
    VulkanBackend be;
    cpu::CpuBackend cpu(2);
    testing::SampleOp want(cpu, R, V), got(be, R, V);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 0.3f);
    std::vector<float> logits(static_cast<size_t>(R * V));
    for (float& x : logits) x = nd(rng);
    const std::vector<sampling::RowParams> ps = {params(1.0f, 0, 0.9999f, 0.0f, 21), params(0.8f, 0, 0.999f, 0.2f, 22)};
    for (testing::SampleOp* op : {&want, &got}) op->set(logits, ps, std::vector<int32_t>(static_cast<size_t>(R * V)), 0);
    for (int32_t step = 0; step < 2; ++step) {
        for (testing::SampleOp* op : {&want, &got}) op->set_logits(logits, step);
        EXPECT_EQ(got.run(), want.run()) << "step " << step;
    }
}

// dsa_topk against the rank-count oracle (support/dsa_topk_fuzz.h, no code shared with either backend): docs/dsa.md's
// tie rules on hand-made rows, then seeded fuzz shapes (ties, NaN, +-inf, +-0.0, int64 window extremes; up to 32768
// keys here). The op conformance suite adds the causal windows and replay.
TEST(VulkanBackend, DsaTopkGivesTheOraclesIndices) {
    require_device();
    VulkanBackend be;
    dsa::TopkRunner runner(be, dsa::fuzz::kMaxRows, dsa::fuzz::kMaxKeys, dsa::fuzz::kMaxTopk);
    constexpr float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    constexpr int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
    const auto row = dsa::fuzz::one_row;
    const std::vector<dsa::TopkCase> hand = {
        row({1, 3, 3, 2, 3}, 0, 5, 2),        row({1, 3, 3, 2, 3}, 0, 5, 4),     row({nan, -inf, nan, 0}, 0, 4, 3),
        row({nan, 3.0f, inf, -inf}, 0, 4, 1), row({-0.0f, 0.0f, -0.0f}, 0, 3, 2), row({5, 4, 3, 2, 1}, -3, 2, 5),
        row({5, 4, 3, 2, 1}, 7, 9, 1),        row({5, 4, 3, 2, 1}, lo, hi, 7),   row({5, 4, 3, 2, 1}, hi, lo, 1),
        row({}, 0, 10, 2),                    row(std::vector<float>(700, 2.5f), 0, 700, 300)};
    for (size_t i = 0; i < hand.size(); ++i) EXPECT_EQ(runner.run(hand[i]), dsa::fuzz::rank_count_oracle(hand[i])) << "case " << i;
    std::mt19937_64 rng(20261205);
    int checked = 0;
    while (checked < 1000) {
        const dsa::TopkCase c = dsa::fuzz::random_case(rng);
        if (c.keys > 32768) continue;  // lavapipe's time
        ASSERT_EQ(runner.run(c), dsa::fuzz::rank_count_oracle(c)) << "shape " << checked << ": "
                                                                   << dsa::fuzz::case_json(c).substr(0, 2000);
        ++checked;
    }
}

// An op without a shader yet says so by name, before anything is recorded.
TEST(VulkanBackend, UnimplementedOpsSayNotImplemented) {
    require_device();
    VulkanBackend be;
    Buffer* b = be.alloc(64, "x");
    const Tensor q = whole(b, DType::F32, 1, 4), w = whole(b, DType::F32, 1, 1), keys = whole(b, DType::F32, 2, 4);
    const Tensor scores = whole(b, DType::F32, 1, 2);
    try {
        be.dsa_indexer(q, w, keys, 1, scores);
        ADD_FAILURE() << "dsa_indexer ran";
    } catch (const NotImplemented& e) {
        EXPECT_STREQ(e.what(), "not implemented on the Vulkan backend: dsa_indexer");
    }
    be.free(b);
}

#else

TEST(VulkanBackend, SkipsWhenBuiltWithoutVulkan) { GTEST_SKIP() << "built without Vulkan (TRACELM_VULKAN=OFF or no libvulkan-dev / glslc)"; }

#endif

}  // namespace
}  // namespace tracelm
