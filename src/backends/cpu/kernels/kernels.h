// Hot CPU kernels. Most exist once per instruction set (portable C++, AVX2+FMA+F16C, AVX-512); the free
// functions below go through the table of active_isa(), chosen once.
//
// rms_norm, silu_mul and the RoPE kernels give the bits of llama.cpp's CPU backend (ggml-cpu built for AVX2) on
// every Isa, not each Isa's own best: docs/ggml-numerics.md, tests/backends/test_ggml_conformance.cpp.
//
// Kernels that take a range [n0, n1) / [r0, r1) / [i0, i1) compute only that part, so callers can split
// work between threads. For a given Isa every matmul output element is bit-identical whatever range or
// batch size T it was computed in.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/cpu_features.h"
#include "runtime/dtype.h"

namespace tracelm::cpu {

// y[t, n] = sum_k x[t, k] * w[n, k] (+ bias[n]) for t in [0,T), n in [n0, n1). x: f32 [T,K] (row stride K);
// w: [N,K] row-major with dtype wt in {F32, BF16, F16}; y: f32 [T,N] (row stride N). bias may be null.
void matmul(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y, int64_t N,
            int64_t n0, int64_t n1);
// Makes the calling thread's kernel scratch memory at its floor size, which covers a decode's matmuls: a thread
// that called it allocates nothing in those kernels later (CpuBackend calls it on every pool thread at the start).
void reserve_thread_scratch();
// Rows [r0, r1) of out = x / sqrt(mean(x^2) + eps) * w (w dtype F32/BF16/F16, length cols); out may alias x.
// ggml's RMS_NORM + MUL, with one implementation for every Isa: the squares x*x rounded to f32 are summed in
// double in index order, mean = (float)(sum / cols), scale = 1.0f / sqrtf(mean + eps), out = (x * scale) * w.
void rms_norm(const float* x, const void* w, DType wt, float eps, float* out, int64_t cols, int64_t r0, int64_t r1);
// Rows [r0, r1) of layer_norm (runtime/backend.h): mean and variance as serial double sums; w and b of type wt.
void layer_norm(const float* x, const void* w, const void* b, DType wt, float eps, float* out, int64_t cols,
                int64_t r0, int64_t r1);
// Elementwise over [i0, i1).
void add(const float* a, const float* b, float* out, int64_t i0, int64_t i1);
// out = silu(gate) * up over [i0, i1) of rows of `cols` elements, as ggml's SWIGLU (AVX2 build) computes it
// row by row: gate / (1 + ggml_v_expf(0 - gate)) * up for each row's first cols - cols % 8 elements, glibc's
// expf for its last cols % 8 (KernelTable::silu_mul).
void silu_mul(const float* gate, const float* up, float* out, int64_t cols, int64_t i0, int64_t i1);
// out = gelu(gate) * up over [i0, i1), GELU's tanh approximation: in f32 with glibc's tanhf (f16_table false), or
// as ggml's GEGLU computes it (f16_table true): 0 for gate <= -10, gate * up for gate >= 10, else the f16 table
// entry of gate rounded to f16 (the f32 formula at that f16 value, rounded to f16) times up (KernelTable::gelu_mul_f16:
// the same bits on every Isa).
void gelu_mul(const float* gate, const float* up, float* out, bool f16_table, int64_t i0, int64_t i1);
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);  // y += a * x

// NeoX RoPE with ggml's numbers (ROPE on GGUF's permuted q/k rows, whose pairs (2i, 2i+1) are tracelm's
// (i, i + head_dim/2)).
// cs[i] = cos and cs[half + i] = sin (glibc's cosf/sinf) of pair i's angle at `pos` as runtime/rope.h defines
// it (theta_scale = rope_theta_scale(theta, head_dim)), for i in [0, half); factors may be null. One
// implementation for every Isa.
void rope_cos_sin(int32_t pos, float theta_scale, const float* factors, int64_t half, float* cs);
// Rotates `heads` heads of head_dim in place by the angles of cs (rope_cos_sin's layout): x0' = fma(x0, cos,
// -(x1 * sin)), x1' = fma(x0, sin, x1 * cos), ggml's rotation as GCC contracts it.
void rope_rotate(float* x, int64_t heads, int64_t head_dim, const float* cs);
// One row of `cols` elements at src, converted to f32 (embedding lookup): f32/bf16/f16, or a quantized type
// (cols a multiple of its block), dequantized exactly as GGML's reference does.
void row_to_f32(const void* src, DType dt, int64_t cols, float* out);
// Row `row` of a table of `rows` rows: row_to_f32 of its bytes, or (a repacked type) of what they hold.
void table_row_to_f32(const void* table, DType dt, int64_t rows, int64_t cols, int64_t row, float* out);

// Which of ggml's float orders a quantized matmul sums in (quant.h; docs/ggml-numerics.md). llama.cpp's MUL_MAT picks
// its kernel by the weight type and the rows of the product (src1's ne11): ggml_vec_dot_<type>_q8_<x> per output,
// llamafile's tinyBLAS_Q0_AVX for Q8_0/Q4_0/Q5_0 products of >= 2 rows (the same float operations), and the tiled
// kernel of ggml-cpu/tiled for the K types from 8 rows on (another order).
enum class QuantOrder : uint8_t {
    VecDot,  // 8 float lanes per output, one FMA per block, hsum at the end (quant.h)
    Tiled,   // K types: one exact integer sum per block, d * s1 (- dmin * s2), then one FMA by x.d (quant.h)
};
// The order llama.cpp's MUL_MAT takes for a product of `rows` activation rows by weights of type wt (a GGML type;
// repacked types are not ggml's and ignore the order): Tiled for the K types from kGgmlTiledMinRows rows.
QuantOrder ggml_quant_order(DType wt, int64_t rows);

// matmul() for block-quantized weights (dtype_is_quantized(wt), K a multiple of the block), with ggml's CPU
// numbers (quant.h): each row of x is first quantized to int8 in ggml's blocks (Q8_0 or Q8_1 blocks of 32, Q8_K
// blocks of 256 for the K types) into `act`, then every weight block is dotted with its activation block in
// integers and the blocks are combined in ggml's float order, `order` (ggml_quant_order; the 32-element types have
// one order, which both name). `act` holds matmul_quant_act_bytes(wt, T, K) bytes of this caller's own (calls
// running at the same time need different ones); it starts with the T quantized rows (quant.h's ActBlock32 /
// ActBlock256). Same contract as matmul: for a given Isa and order every output element is bit-identical
// whatever [n0, n1) or T it was computed in, and here also the same on every Isa.
size_t matmul_quant_act_bytes(DType wt, int64_t T, int64_t K);
void matmul_quant(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y,
                  int64_t N, int64_t n0, int64_t n1, void* act, QuantOrder order = QuantOrder::VecDot);
// matmul_quant's two halves (QuantKernels): quantize x into act, then the products of weight rows [n0, n1) from it.
void quantize_activations(const float* x, int64_t T, int64_t K, DType wt, void* act);
void matmul_quantized(const void* act, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y,
                      int64_t N, int64_t n0, int64_t n1, QuantOrder order = QuantOrder::VecDot);
// Reads `bytes` of `data` and returns a checksum-like value so the read is not optimised away (measures
// memory bandwidth).
double read_sweep(const void* data, size_t bytes);

// The summation orders of ggml's f16 x f16 and f32 x f32 dot products (docs/ggml-numerics.md): its MUL_MAT sums a
// batch of >= 2 tokens with llamafile's tinyBLAS and a single token with ggml_vec_dot_f16 / ggml_vec_dot_f32.
enum class GgmlDot : uint8_t {
    Tinyblas,  // one 8-lane FMA accumulator over k in steps of 8, then hsum; n a multiple of 8
    VecDot,    // 4 accumulators of 8 lanes over steps of 32, reduced (a0+a2)+(a1+a3), two hadds; then the tail
               // (f16: in double; f32: in f32)
};
// ggml's f32 MUL_MAT of x [T, K] by w [N, K] into y [T, N], columns [n0, n1), in `order` (KernelTable's
// matmul_f32_ggml): what llama.cpp computes for an f32 weight such as a MoE router.
void matmul_f32_ggml(const float* x, int64_t T, int64_t K, const float* w, float* y, int64_t N, int64_t n0, int64_t n1,
                     GgmlDot order);

// Attention over an f16 KV cache with the numbers of llama.cpp's CPU backend (ggml-cpu built for AVX2+FMA+F16C),
// on every Isa: the Avx512 table uses the AVX2 kernels (ggml's AVX-512 build sums differently), the portable
// ones emulate them with std::fma (attention_*.cpp). cpu::paged_attention_f16_range composes them.
struct F16AttentionKernels {
    // out[i] = x[i] rounded to f16 (to nearest even, as F16C).
    void (*to_f16)(const float* x, uint16_t* out, int64_t n);
    // For each of nq queries sharing the key rows (the query heads of one kv head): p[i * p_stride + j] = the f16
    // dot of key row base + keys[j] and q + i * n in `order`, over ggml's element order, for j in [0, count); -inf
    // (a masked position) where keys[j] < 0. With `interleaved`, the key rows are stored as tracelm keeps the q/k
    // heads of llama-architecture GGUFs: ggml's element 2i at i and 2i+1 at i + n/2 (n even).
    void (*scores)(const uint16_t* base, const int64_t* keys, int64_t count, const uint16_t* q, int nq, int64_t n,
                   GgmlDot order, bool interleaved, float* p, int64_t p_stride);
    // p[0, n) = softmax(p * scale) as ggml's SOFT_MAX computes it over a row padded with masked (-inf) entries to a
    // multiple of 8, each probability then rounded to f16 (stored widened). p has room for n rounded up to 8.
    void (*soft_max)(float* p, int64_t n, float scale);
    // For each of nq queries sharing the value rows, with probabilities pi = p + i * p_stride and accumulators
    // ai = acc + i * lanes * n: for j in [0, count) in order, where values[j] >= 0, ai[(j % lanes) * n + d] =
    // fma(v[d], pi[j], that) for d in [0, n), v = base + values[j]: the P.V dot's terms, in `lanes` interleaved
    // partial sums per output d.
    void (*accumulate)(const float* p, int64_t p_stride, int nq, const uint16_t* base, const int64_t* values,
                       int64_t count, int lanes, float* acc, int64_t n);
    // A prefill tile: for nq <= kF16AttentionTile queries sharing the key and value rows (n a multiple of 8), what
    // scores (Tinyblas order), soft_max and accumulate (8 lanes) give each query, each row loaded once for all of
    // them. Query i (its q in ggml's element order, values exact in f16, at q + i * n) sees positions
    // [starts[i], counts[i]) of offsets (keys from k_base, values from v_base); its accumulators are
    // acc + i * 8 * n. p: room for the tile's scores, kF16AttentionTile * p_stride floats, p_stride at least the
    // largest count rounded up to 8.
    void (*attend_tile)(const uint16_t* k_base, const uint16_t* v_base, const int64_t* offsets, const int64_t* counts,
                        const int64_t* starts, int nq, const float* q, int64_t n, bool interleaved, float scale,
                        float* p, int64_t p_stride, float* acc);
};
// The most queries of one tile call: their scores and accumulators stay in the L1/L2 caches.
inline constexpr int kF16AttentionTile = 16;
// Largest head_dim the attention kernels' on-stack buffers hold; the model loader rejects larger ones.
inline constexpr int kMaxHeadDim = 512;

// The quantized-weight kernels of one Isa (quant_*.cpp); dequantization has one implementation for all.
// matmul is quantize then product: a caller multiplying one input by several matrices of one type, or the same
// matrix in several row ranges, quantizes it once (the activations depend on x and wt only).
struct QuantKernels {
    void (*matmul)(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y,
                   int64_t N, int64_t n0, int64_t n1, void* act, QuantOrder order);
    // The T rows of x quantized for products with weights of type wt, into act (matmul_quant_act_bytes).
    void (*quantize)(const float* x, int64_t T, int64_t K, DType wt, void* act);
    // matmul's outputs from act as quantize left it (same T, K, wt), which it only reads.
    void (*product)(const void* act, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y,
                    int64_t N, int64_t n0, int64_t n1, QuantOrder order);
};

// One implementation of every kernel. Entries taking a DType expect F32, BF16 or F16 (the free functions
// check this and throw std::invalid_argument otherwise); `quant` takes the quantized types.
struct KernelTable {
    Isa isa;
    void (*matmul)(const float* x, int64_t T, int64_t K, const void* w, DType wt, const float* bias, float* y,
                   int64_t N, int64_t n0, int64_t n1);
    void (*add)(const float* a, const float* b, float* out, int64_t i0, int64_t i1);
    // silu(gate) * up over n elements of one row: [0, n_vec) with ggml_v_expf (the operations of its AVX2
    // variant, lane by lane on every Isa), [n_vec, n) with expf (ggml's scalar tail of a row).
    void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n, int64_t n_vec);
    // ggml's GEGLU over n elements: 0 where gate <= -10, gate * up where gate >= 10, else table[f16(gate)] * up, the
    // table holding the f16 GELU of every f16 value (as f32) and f16() rounding to nearest even as F16C does.
    void (*gelu_mul_f16)(const float* table, const float* gate, const float* up, float* out, int64_t n);
    float (*dot_f32)(const float* a, const float* b, int64_t n);
    // y[t, n] for n in [n0, n1) = ggml's f32 MUL_MAT of row t of x [T, K] by row n of w [N, K] (f32), in `order`:
    // VecDot is ggml_vec_dot_f32 (4 accumulators of 8 lanes over steps of 32, GGML_F32x8_REDUCE, a tail of K % 32
    // added in f32 after it), Tinyblas llamafile's tinyBLAS (one 8-lane FMA accumulator over steps of 8, its hsum;
    // K a multiple of 8). The same bits on every Isa.
    void (*matmul_f32_ggml)(const float* x, int64_t T, int64_t K, const float* w, float* y, int64_t N, int64_t n0,
                            int64_t n1, GgmlDot order);
    void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
    void (*rope_rotate)(float* x, int64_t heads, int64_t head_dim, const float* cs);
    void (*row_to_f32)(const void* src, DType dt, int64_t cols, float* out);
    double (*read_sweep)(const void* data, size_t bytes);
    const QuantKernels* quant;
    const F16AttentionKernels* f16_attention;
};

// The table of one Isa, for tests and benchmarks; throws std::invalid_argument if this CPU cannot run it.
const KernelTable& kernels_for(Isa isa);
// The table the free functions use: kernels_for(active_isa()).
const KernelTable& active_kernels();

}  // namespace tracelm::cpu
