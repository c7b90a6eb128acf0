// The dispatcher: the free kernel functions go through the table of active_isa(), chosen once; also the
// per-thread scratch memory the ISA files use, and the kernels with one implementation for every Isa.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#include "backends/cpu/kernels/kernels_internal.h"
#include "backends/cpu/kernels/quant.h"

namespace tracelm::cpu {
namespace {

void check_float_dtype(DType dt, const char* what) {
    if (dt != DType::F32 && dt != DType::BF16 && dt != DType::F16)
        throw std::invalid_argument(std::string(what) + ": unsupported dtype " + std::string(dtype_name(dt)));
}

void check_quant_row(DType dt, int64_t cols, const char* what) {
    if (!dtype_is_quantized(dt))
        throw std::invalid_argument(std::string(what) + ": " + std::string(dtype_name(dt)) + " is not quantized");
    if (!dtype_row_ok(dt, cols))
        throw std::invalid_argument(std::string(what) + ": " + std::to_string(cols) + " columns are not whole " +
                                    std::string(dtype_name(dt)) + " blocks");
}

// Calls f with a reader of element i of a weight of type wt (f32, bf16 or f16) as f32.
template <class F>
void with_weight_reader(DType wt, F f) {
    const auto half = [](const void* w) { return static_cast<const uint16_t*>(w); };
    switch (wt) {
        case DType::BF16: f([half](const void* w, int64_t i) { return bf16_to_f32(half(w)[i]); }); break;
        case DType::F16: f([half](const void* w, int64_t i) { return f16_to_f32(half(w)[i]); }); break;
        default: f([](const void* w, int64_t i) { return static_cast<const float*>(w)[i]; });
    }
}

// ggml's order for rms_norm's sum of squares: a serial chain of double additions per row, about 4 cycles an element.
// The chains of kRows rows advance together (a fixed count, so the sums stay in registers), so that the core
// overlaps them; each keeps its own order.
template <int kRows>
void sums_of_squares(const float* x, int64_t cols, double* sums) {
    double acc[kRows] = {};
    for (int64_t i = 0; i < cols; ++i)
        for (int k = 0; k < kRows; ++k) {
            const float v = x[k * cols + i];
            acc[k] += static_cast<double>(v * v);
        }
    for (int k = 0; k < kRows; ++k) sums[k] = acc[k];
}

// rms_norm's rows with weights read by load(i) as f32.
template <class Load>
void rms_norm_rows(const float* x, Load load, float eps, float* out, int64_t cols, int64_t r0, int64_t r1) {
    constexpr int kRows = 8;
    for (int64_t g = r0; g < r1;) {
        double sums[kRows];
        const int n = r1 - g >= kRows ? kRows : 1;
        if (n == kRows) {
            sums_of_squares<kRows>(x + g * cols, cols, sums);
        } else {
            sums_of_squares<1>(x + g * cols, cols, sums);
        }
        for (int k = 0; k < n; ++k, ++g) {
            const float* xr = x + g * cols;
            float* o = out + g * cols;
            const auto mean = static_cast<float>(sums[k] / static_cast<double>(cols));
            const float scale = 1.0f / std::sqrt(mean + eps);
            for (int64_t i = 0; i < cols; ++i) o[i] = xr[i] * scale * load(i);
        }
    }
}

struct ScratchBlock {
    void* data = nullptr;
    size_t bytes = 0;
    ScratchBlock() = default;
    ScratchBlock(const ScratchBlock&) = delete;
    ScratchBlock& operator=(const ScratchBlock&) = delete;
    ~ScratchBlock() { std::free(data); }
};

// The least a thread's scratch holds: a decode's activations for every Isa's float matmul (AVX2's permuted f32
// x, AVX-512's bf16 x, the portable kernel's converted weight row) up to 4 tokens of K <= 16384 or 16 of K <= 4096.
// A kernel within it never grows the scratch, on whichever thread the dynamic row chunks of a call (a replay's
// included) land, once the thread has made it (reserve_thread_scratch).
constexpr size_t kScratchFloor = size_t{256} << 10;

}  // namespace

void* detail::scratch(size_t bytes) {
    thread_local ScratchBlock block;
    if (bytes > block.bytes) {
        const size_t want = std::max(kScratchFloor, (bytes + 63) / 64 * 64);
        void* p = std::aligned_alloc(64, want);
        if (p == nullptr) throw std::bad_alloc();
        std::free(block.data);
        block.data = p;
        block.bytes = want;
    }
    return block.data;
}

void reserve_thread_scratch() { detail::scratch(kScratchFloor); }

const KernelTable& kernels_for(Isa isa) {
    if (!can_run(isa))
        throw std::invalid_argument(std::string("this CPU cannot run the ") + isa_name(isa) + " kernels");
    switch (isa) {
        case Isa::Portable: return detail::portable_kernels;
        case Isa::Avx2: return detail::avx2_kernels;
        case Isa::AvxVnni: return detail::avxvnni_kernels;
        case Isa::Avx512: return detail::avx512_kernels;
    }
    throw std::invalid_argument("unknown Isa");
}

const KernelTable& active_kernels() {
    static const KernelTable& table = kernels_for(active_isa());
    return table;
}

void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            int64_t n0, int64_t n1) {
    check_float_dtype(wt, "matmul");
    active_kernels().matmul(x, T, K, w, wt, bias, y, N, n0, n1);
}

void rms_norm(const float* x, const void* w, DType wt, float eps, float* out, int64_t cols, int64_t r0, int64_t r1) {
    check_float_dtype(wt, "rms_norm");
    with_weight_reader(wt, [&](auto at) {
        rms_norm_rows(x, [&](int64_t i) { return at(w, i); }, eps, out, cols, r0, r1);
    });
}

void layer_norm(const float* x, const void* w, const void* b, DType wt, float eps, float* out, int64_t cols,
                int64_t r0, int64_t r1) {
    check_float_dtype(wt, "layer_norm");
    with_weight_reader(wt, [&](auto at) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * cols;
            float* o = out + r * cols;
            // Serial sums in double, as rms_norm's: one fixed order.
            double sum = 0.0;
            for (int64_t i = 0; i < cols; ++i) sum += static_cast<double>(xr[i]);
            const auto mean = static_cast<float>(sum / static_cast<double>(cols));
            double ss = 0.0;
            for (int64_t i = 0; i < cols; ++i) ss += static_cast<double>((xr[i] - mean) * (xr[i] - mean));
            const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(cols)) + eps);
            // out may alias x: element i is read before it is written.
            for (int64_t i = 0; i < cols; ++i) o[i] = (xr[i] - mean) * scale * at(w, i) + at(b, i);
        }
    });
}

void add(const float* a, const float* b, float* out, int64_t i0, int64_t i1) {
    active_kernels().add(a, b, out, i0, i1);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t cols, int64_t i0, int64_t i1) {
    const KernelTable& k = active_kernels();
    // Each row's part of [i0, i1) at a time, split where the row's 8-wide part ends.
    for (int64_t i = i0; i < i1;) {
        const int64_t row_end = (i / cols + 1) * cols, end = std::min(i1, row_end);
        const int64_t vec_end = std::clamp(row_end - cols % 8, i, end);
        k.silu_mul(gate + i, up + i, out + i, end - i, vec_end - i);
        i = end;
    }
}

namespace {

// ggml's GELU_COEF_A and SQRT_2_OVER_PI, and its ggml_gelu_f32 term by term as an FMA build of ggml-cpu computes
// it: GCC contracts 1 + a*x*x into fma(a*x, x, 1), which one entry of the f16 table tells apart.
float gelu_f32(float x) {
    constexpr float kCoefA = 0.044715f, kSqrt2OverPi = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kCoefA * x, x, 1.0f)));
}

// ggml_table_gelu_f16 widened to f32: entry h is the f16 GELU of the f16 value h (the f32 formula at that value,
// rounded to f16), as f32 so that vector kernels gather it directly. Built on first use (a function static).
const std::array<float, 65536>& gelu_f16_table() {
    static const std::array<float, 65536> table = [] {
        std::array<float, 65536> t{};
        for (uint32_t i = 0; i < t.size(); ++i)
            t[i] = f16_to_f32(f32_to_f16(gelu_f32(f16_to_f32(static_cast<uint16_t>(i)))));
        return t;
    }();
    return table;
}

}  // namespace

void gelu_mul(const float* gate, const float* up, float* out, bool f16_table, int64_t i0, int64_t i1) {
    if (i1 <= i0) return;
    if (f16_table) {
        active_kernels().gelu_mul_f16(gelu_f16_table().data(), gate + i0, up + i0, out + i0, i1 - i0);
        return;
    }
    for (int64_t i = i0; i < i1; ++i) out[i] = gelu_f32(gate[i]) * up[i];
}

float dot_f32(const float* a, const float* b, int64_t n) { return active_kernels().dot_f32(a, b, n); }
void matmul_f32_ggml(const float* x, int64_t T, int64_t K, const float* w, float* y, int64_t N, int64_t n0, int64_t n1,
                     GgmlDot order) {
    active_kernels().matmul_f32_ggml(x, T, K, w, y, N, n0, n1, order);
}

void axpy_f32(float a, const float* x, float* y, int64_t n) { active_kernels().axpy_f32(a, x, y, n); }

void rope_cos_sin(int32_t pos, float theta_scale, const float* factors, int64_t half, float* cs) {
    float theta = static_cast<float>(pos);
    for (int64_t i = 0; i < half; ++i) {
        const float angle = factors != nullptr ? theta / factors[i] : theta;
        cs[i] = std::cos(angle);
        cs[half + i] = std::sin(angle);
        theta *= theta_scale;
    }
}

void rope_rotate(float* x, int64_t heads, int64_t head_dim, const float* cs) {
    active_kernels().rope_rotate(x, heads, head_dim, cs);
}

void row_to_f32(const void* src, DType dt, int64_t cols, float* out) {
    if (dtype_is_quantized(dt)) {
        check_quant_row(dt, cols, "row_to_f32");
        detail::dequantize_row(src, dt, cols, out);
        return;
    }
    check_float_dtype(dt, "row_to_f32");
    active_kernels().row_to_f32(src, dt, cols, out);
}

void table_row_to_f32(const void* table, DType dt, int64_t rows, int64_t cols, int64_t row, float* out) {
    if (!dtype_is_repacked(dt)) {
        row_to_f32(static_cast<const char*>(table) + row * static_cast<int64_t>(dtype_row_bytes(dt, cols)), dt, cols, out);
        return;
    }
    check_quant_row(dt, cols, "table_row_to_f32");
    detail::dequantize_repacked_row(table, dt, rows, cols, row, out);
}

size_t matmul_quant_act_bytes(DType wt, int64_t T, int64_t K) {
    check_quant_row(wt, K, "matmul_quant");
    const auto t = static_cast<size_t>(T < 0 ? 0 : T), nb = static_cast<size_t>(K / dtype_block_elems(wt));
    if (dtype_block_elems(wt) != 32) return t * nb * sizeof(quant::ActBlock256);
    // quant.h: blocks, then (SIMD fast numerics) each block's offset for the biased weights.
    if (dtype_is_repacked(wt)) return t * nb * (sizeof(quant::ActBlock32) + sizeof(int32_t));
    // quant.h: blocks, token-major d, s, q, and the wide tiles' 8 offset lanes and 8 scale lanes.
    return t * nb * (sizeof(quant::ActBlock32) + 2 * sizeof(float) + 32 + 8 * sizeof(int32_t) + 8 * sizeof(float));
}

QuantOrder ggml_quant_order(DType wt, int64_t rows) {
    return ggml_has_tiled_order(wt) && rows >= kGgmlTiledMinRows ? QuantOrder::Tiled : QuantOrder::VecDot;
}

void matmul_quant(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y,
                  int64_t N, int64_t n0, int64_t n1, void* act, QuantOrder order) {
    check_quant_row(wt, K, "matmul_quant");
    active_kernels().quant->matmul(x, T, K, w, wt, bias, y, N, n0, n1, act, order);
}

void quantize_activations(const float* x, int64_t T, int64_t K, DType wt, void* act) {
    check_quant_row(wt, K, "quantize_activations");
    active_kernels().quant->quantize(x, T, K, wt, act);
}

void matmul_quantized(const void* act, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y,
                      int64_t N, int64_t n0, int64_t n1, QuantOrder order) {
    check_quant_row(wt, K, "matmul_quantized");
    active_kernels().quant->product(act, T, K, w, wt, bias, y, N, n0, n1, order);
}

double read_sweep(const void* data, size_t bytes) { return active_kernels().read_sweep(data, bytes); }

}  // namespace tracelm::cpu
