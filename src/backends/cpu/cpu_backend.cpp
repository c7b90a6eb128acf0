#include "backends/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/paged_attention.h"
#include "ops/dsa/dsa_indexer.h"
#include "ops/dsa/dsa_topk.h"
#include "ops/dsa/dsa_topk_cpu.h"
#include "ops/dsa/sparse_attention.h"
#include "runtime/op_checks.h"

namespace tracelm::cpu {

namespace {

using checks::is_float_weight;
using checks::require;
using checks::require_dtype;

// ---- packed op arguments and their entry points (each runs items [b, e)) ----

struct CopyArgs {
    const char* src;
    char* dst;
    int64_t row_bytes;
};
void run_copy(const CopyArgs& a, int64_t b, int64_t e) {
    std::memcpy(a.dst + b * a.row_bytes, a.src + b * a.row_bytes, static_cast<size_t>((e - b) * a.row_bytes));
}

struct EmbeddingArgs {
    const int32_t* ids;
    const char* table;
    float* out;
    int64_t vocab, dim, row_bytes;
    DType dt;
};
void run_embedding(const EmbeddingArgs& a, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
        const int32_t id = a.ids[t];
        float* out = a.out + t * a.dim;
        if (id < 0 || id >= a.vocab) {
            std::fill(out, out + a.dim, 0.0f);
        } else {
            row_to_f32(a.table + static_cast<int64_t>(id) * a.row_bytes, a.dt, a.dim, out);
        }
    }
}

struct RmsNormArgs {
    const float* x;
    const void* w;
    float* out;
    int64_t cols;
    float eps;
    DType wt;
};
void run_rms_norm(const RmsNormArgs& a, int64_t b, int64_t e) { rms_norm(a.x, a.w, a.wt, a.eps, a.out, a.cols, b, e); }

struct MatmulArgs {
    const float* x;
    const void* w;
    const float* bias;
    float* y;
    int64_t T, K, N;
    DType wt;
};
void run_matmul(const MatmulArgs& a, int64_t b, int64_t e) { matmul(a.x, a.T, a.K, a.w, a.wt, a.bias, a.y, a.N, b, e); }

// Rows of a matmul go to threads in units of this many (float weights: the op's grain).
constexpr int64_t kMatmulRowGrain = 16;
// Float-weight matmuls are split dynamically in chunks of whole grains holding about this many bytes of
// weights. Each chunk starts a fresh stream whose first rows nothing has prefetched: 128 KiB chunks made
// qwen3-0.6b bf16 decode about a tenth slower than 512 KiB ones, which still leave hundreds of chunks per
// step to balance two threads with.
constexpr int64_t kMatmulChunkBytes = int64_t{512} << 10;
int64_t matmul_row_chunk(int64_t K, DType wt) {
    const int64_t row_bytes = K * static_cast<int64_t>(dtype_size(wt));
    const int64_t grains = row_bytes > 0 ? kMatmulChunkBytes / (row_bytes * kMatmulRowGrain) : 1;
    return (grains > 1 ? grains : 1) * kMatmulRowGrain;
}

// Quantized weights: the items are the pool's threads (item i runs on thread i). Each quantizes all T
// activation rows into its own slice of the backend's scratch (act + i * act_stride) and computes its share
// of the weight rows, split as float matmuls are. Quantizing the few activation rows on every thread costs
// far less than a barrier between a shared quantization and the dot products would.
struct QuantMatmulArgs {
    const float* x;
    const void* w;
    const float* bias;
    float* y;
    char* act;
    int64_t T, K, N, act_stride, threads;
    DType wt;
};
void run_quant_matmul(const QuantMatmulArgs& a, int64_t b, int64_t e) {
    const int64_t units = (a.N + kMatmulRowGrain - 1) / kMatmulRowGrain;
    for (int64_t i = b; i < e; ++i) {
        const int64_t n0 = units * i / a.threads * kMatmulRowGrain;
        const int64_t n1 = std::min(a.N, units * (i + 1) / a.threads * kMatmulRowGrain);
        if (n0 < n1) matmul_quant(a.x, a.T, a.K, a.w, a.wt, a.bias, a.y, a.N, n0, n1, a.act + i * a.act_stride);
    }
}

// Names of the backend-owned scratch buffers: the activations of quantized matmuls, the f16 attention workspace.
constexpr const char* kQuantScratchName = "cpu:matmul_quant_scratch";
constexpr const char* kAttentionScratchName = "cpu:attention_f16_scratch";

struct RopeArgs {
    float* x;
    const int32_t* positions;
    const float* factors;  // null: none
    float theta_scale;
    int heads, head_dim;
};
void run_rope(const RopeArgs& a, int64_t b, int64_t e) {
    float cs[kMaxHeadDim];  // rope_cos_sin's layout
    for (int64_t t = b; t < e; ++t) {
        rope_cos_sin(a.positions[t], a.theta_scale, a.factors, a.head_dim / 2, cs);
        rope_rotate(a.x + t * static_cast<int64_t>(a.heads) * a.head_dim, a.heads, a.head_dim, cs);
    }
}

// Stores a row of `dim` values at a cache slot: as they are in an f32 cache, rounded to f16 in an f16 one.
void store_kv_row(const float* x, void* cache, int64_t slot, int64_t dim, bool f16) {
    if (f16) {
        active_kernels().f16_attention->to_f16(x, static_cast<uint16_t*>(cache) + slot * dim, dim);
    } else {
        std::memcpy(static_cast<float*>(cache) + slot * dim, x, sizeof(float) * static_cast<size_t>(dim));
    }
}

struct KvWriteArgs {
    const float* k;
    const float* v;
    const int32_t* slots;
    void* k_cache;
    void* v_cache;
    int64_t dim, num_slots;
    bool f16;
};
void run_kv_write(const KvWriteArgs& a, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
        const int64_t slot = a.slots[t];
        if (slot < 0 || slot >= a.num_slots) continue;
        store_kv_row(a.k + t * a.dim, a.k_cache, slot, a.dim, a.f16);
        store_kv_row(a.v + t * a.dim, a.v_cache, slot, a.dim, a.f16);
    }
}

struct BinaryArgs {
    const float* a;
    const float* b;
    float* out;
};
void run_add(const BinaryArgs& a, int64_t b, int64_t e) { add(a.a, a.b, a.out, b, e); }

struct SiluMulArgs {
    const float* gate;
    const float* up;
    float* out;
    int64_t cols;
};
void run_silu_mul(const SiluMulArgs& a, int64_t b, int64_t e) { silu_mul(a.gate, a.up, a.out, a.cols, b, e); }

struct AddRmsNormArgs {
    float* x;
    const float* delta;
    const void* w;
    float* out;
    int64_t cols;
    float eps;
    DType wt;
};
// Row by row with the same kernels as add then rms_norm, so the fused op gives their exact numbers.
void run_add_rms_norm(const AddRmsNormArgs& a, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
        float* x = a.x + r * a.cols;
        add(x, a.delta + r * a.cols, x, 0, a.cols);
    }
    rms_norm(a.x, a.w, a.wt, a.eps, a.out, a.cols, b, e);
}

struct QkvPrologueArgs {
    float* q;
    float* k;
    const float* v;
    const void* q_norm;  // null: no norm
    const void* k_norm;
    const int32_t* positions;
    const float* rope_factors;  // null: none
    float theta_scale;
    const int32_t* slots;
    void* k_cache;
    void* v_cache;
    int64_t num_slots;
    float eps;
    DType norm_dt;
    int heads, kv_heads, head_dim;
    bool f16_cache;
};
// One token per item: its q and k heads normed (per head, with rms_norm) and rotated (as run_rope, by one set of
// angles), then k and v stored at the token's slot (as run_kv_write).
void run_qkv_prologue(const QkvPrologueArgs& a, int64_t b, int64_t e) {
    const int64_t q_dim = static_cast<int64_t>(a.heads) * a.head_dim, kv_dim = static_cast<int64_t>(a.kv_heads) * a.head_dim;
    float cs[kMaxHeadDim];
    for (int64_t t = b; t < e; ++t) {
        float* q = a.q + t * q_dim;
        float* k = a.k + t * kv_dim;
        if (a.q_norm != nullptr) {
            rms_norm(q, a.q_norm, a.norm_dt, a.eps, q, a.head_dim, 0, a.heads);
            rms_norm(k, a.k_norm, a.norm_dt, a.eps, k, a.head_dim, 0, a.kv_heads);
        }
        rope_cos_sin(a.positions[t], a.theta_scale, a.rope_factors, a.head_dim / 2, cs);
        rope_rotate(q, a.heads, a.head_dim, cs);
        rope_rotate(k, a.kv_heads, a.head_dim, cs);
        const int64_t slot = a.slots[t];
        if (slot < 0 || slot >= a.num_slots) continue;
        store_kv_row(k, a.k_cache, slot, kv_dim, a.f16_cache);
        store_kv_row(a.v + t * kv_dim, a.v_cache, slot, kv_dim, a.f16_cache);
    }
}

struct GatherArgs {
    const float* x;
    const int32_t* query_start;
    float* out;
    int64_t rows, cols;
};
void run_gather_last(const GatherArgs& a, int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
        const int64_t r = static_cast<int64_t>(a.query_start[s + 1]) - 1;
        float* out = a.out + s * a.cols;
        if (r < 0 || r >= a.rows) {
            std::fill(out, out + a.cols, 0.0f);
        } else {
            std::memcpy(out, a.x + r * a.cols, sizeof(float) * static_cast<size_t>(a.cols));
        }
    }
}

struct ArgmaxArgs {
    const float* logits;
    int32_t* ids;
    int64_t cols;
};
void run_argmax(const ArgmaxArgs& a, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
        const float* row = a.logits + r * a.cols;
        int64_t best = 0;
        float best_v = -std::numeric_limits<float>::infinity();
        bool found = false;
        for (int64_t i = 0; i < a.cols; ++i) {
            // Strictly greater keeps the lowest index on ties; NaN compares false and never wins.
            if (row[i] > best_v || (!found && row[i] == best_v)) {
                best_v = row[i];
                best = i;
                found = true;
            }
        }
        a.ids[r] = static_cast<int32_t>(best);
    }
}

struct AdvanceArgs {
    const int32_t* sampled;
    int32_t* token_ids;
    int32_t* positions;
    int32_t* slots;
    int32_t* seq_lens;
    const int32_t* block_tables;
    int32_t* step;
    int32_t* history;
    int64_t history_rows;
    int num_seqs, max_blocks, block_size;
};
void run_advance(const AdvanceArgs& a, int64_t, int64_t) {
    const int32_t step = *a.step;
    for (int s = 0; s < a.num_seqs; ++s) {
        const int32_t id = a.sampled[s];
        if (step >= 0 && step < a.history_rows) a.history[static_cast<int64_t>(step) * a.num_seqs + s] = id;
        a.token_ids[s] = id;
        const int32_t pos = a.positions[s] + 1;
        a.positions[s] = pos;
        a.seq_lens[s] += 1;
        const int32_t blk = pos / a.block_size;
        const int32_t page = blk < a.max_blocks ? a.block_tables[static_cast<int64_t>(s) * a.max_blocks + blk] : -1;
        a.slots[s] = page < 0 ? -1 : page * a.block_size + pos % a.block_size;
    }
    *a.step = step + 1;
}

// Checks an attention call (named `op` in errors) and resolves its arguments.
PagedAttentionArgs attention_args(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const AttentionMeta& meta, int heads, int kv_heads, int head_dim, float scale,
                                  const Tensor& out, const char* op) {
    checks::attention(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, kMaxHeadDim, out, op);
    return {q.ptr<float>(),
            k_cache.raw(),
            v_cache.raw(),
            meta.block_tables.ptr<int32_t>(),
            meta.seq_lens.ptr<int32_t>(),
            meta.query_start_loc.ptr<int32_t>(),
            out.ptr<float>(),
            k_cache.rows,
            meta.num_seqs,
            static_cast<int>(meta.block_tables.cols),
            meta.block_size,
            heads,
            kv_heads,
            head_dim,
            scale};
}

Footprint attention_footprint(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                              const Tensor& out) {
    return Footprint()
        .read(q)
        .read(k_cache)
        .read(v_cache)
        .read(meta.block_tables)
        .read(meta.seq_lens)
        .read(meta.query_start_loc)
        .write(out);
}

}  // namespace

CpuBackend::CpuBackend(int threads) : pool_(threads) {
    // Every pool thread makes its kernel scratch now (item t runs on thread t), so that no thread's first use of
    // it, in a replay perhaps, allocates.
    struct NoArgs {};
    submit<NoArgs>([](const NoArgs&, int64_t, int64_t) { reserve_thread_scratch(); }, NoArgs{}, Footprint{}, pool_.size());
}

CpuBackend::~CpuBackend() {
    for (auto& b : buffers_) munmap(b->map_base, b->map_bytes);
}

template <typename Args>
void CpuBackend::submit(void (*fn)(const Args&, int64_t, int64_t), const Args& args, const Footprint& fp,
                        int64_t items, int64_t grain, int64_t chunk) {
    static_assert(sizeof(Args) + sizeof(fn) <= CpuOp::kArgBytes, "op arguments too large");
    static_assert(std::is_trivially_copyable_v<Args>);
    CpuOp op;
    // Type erasure without casting function types: the packed bytes hold the typed entry point
    // followed by its arguments, and one trampoline per Args type unpacks them.
    op.fn = [](const void* packed, int64_t b, int64_t e) {
        void (*typed)(const Args&, int64_t, int64_t);
        Args a;
        std::memcpy(&typed, packed, sizeof(typed));
        std::memcpy(&a, static_cast<const unsigned char*>(packed) + sizeof(typed), sizeof(Args));
        typed(a, b, e);
    };
    op.items = items;
    op.grain = grain < 1 ? 1 : grain;
    op.chunk = chunk;
    std::memcpy(op.args, &fn, sizeof(fn));
    std::memcpy(op.args + sizeof(fn), &args, sizeof(Args));
    if (capturing()) {
        if (!recording_.empty() && phase_.admits(fp)) {
            recording_.back().barrier = false;
        } else {
            phase_.clear();
        }
        phase_.add(fp);
        recording_.push_back(op);
    } else {
        dispatch(&op, 1);
        ++eager_ops_;
    }
}

void CpuBackend::dispatch(const CpuOp* ops, size_t n) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_.run(ops, n);
    busy_ns_ += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    ops_executed_ += n;
}

// ---- memory ----

// Decode reads every weight once per token, as a few long streams. On 4 KiB pages such a stream takes a TLB
// miss and page walk every 4 KiB; on 2 MiB pages it does not, which made qwen3-0.6b bf16 decode about a tenth
// faster here. So a buffer of at least one huge page starts on a huge-page boundary (the mapping is one huge
// page longer, to have room to align) and asks for transparent huge pages. It is only advice: where THP is
// off, the buffer works the same on small pages.
constexpr size_t kHugePage = size_t{2} << 20;

Buffer* CpuBackend::do_alloc(size_t bytes, const std::string& name) {
    const size_t size = bytes == 0 ? 1 : bytes;
    const bool huge = size >= kHugePage;
    const size_t mapped = huge ? size + kHugePage : size;
    void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        throw std::runtime_error("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes for '" + name + "'");
    }
    auto b = std::make_unique<CpuBuffer>();
    b->map_base = base;
    b->map_bytes = mapped;
    auto* data = static_cast<unsigned char*>(base);
    if (huge) {
        data += (kHugePage - reinterpret_cast<uintptr_t>(base) % kHugePage) % kHugePage;
        madvise(data, size, MADV_HUGEPAGE);
    }
    b->data = data;
    b->bytes = size;
    b->name = name;
    buffers_.push_back(std::move(b));
    return buffers_.back().get();
}

void CpuBackend::do_free(Buffer* b) {
    auto it = std::find_if(buffers_.begin(), buffers_.end(), [&](const auto& p) { return p.get() == b; });
    if (it == buffers_.end()) throw std::invalid_argument("cpu backend: free of unknown buffer");
    munmap((*it)->map_base, (*it)->map_bytes);
    buffers_.erase(it);
}

void CpuBackend::do_upload(const Tensor& dst, const void* src) { std::memcpy(dst.raw(), src, dst.nbytes()); }

void CpuBackend::do_download(const Tensor& src, void* dst) { std::memcpy(dst, src.raw(), src.nbytes()); }

// ---- graphs ----

void CpuBackend::do_begin_capture() {
    recording_.clear();
    phase_.clear();
}

GraphId CpuBackend::do_end_capture() {
    graphs_.push_back(std::move(recording_));
    recording_ = {};
    return static_cast<GraphId>(graphs_.size() - 1);
}

void CpuBackend::do_replay(GraphId g) {
    if (g < 0 || static_cast<size_t>(g) >= graphs_.size()) throw std::invalid_argument("replay of unknown graph");
    const auto& ops = graphs_[static_cast<size_t>(g)];
    dispatch(ops.data(), ops.size());
}

size_t CpuBackend::graph_barriers(GraphId g) const {
    const auto& ops = graphs_.at(static_cast<size_t>(g));
    // The last op always ends with one (it signals completion).
    return ops.empty() ? 0
                       : 1 + static_cast<size_t>(std::count_if(ops.begin(), ops.end() - 1,
                                                                [](const CpuOp& op) { return op.barrier; }));
}

void CpuBackend::do_destroy_graph(GraphId g) {
    if (g < 0 || static_cast<size_t>(g) >= graphs_.size()) throw std::invalid_argument("destroy of unknown graph");
    graphs_[static_cast<size_t>(g)] = {};
}

// A scratch buffer is found or made at submission, so that no eager call and no replay allocates. It only grows:
// a recorded graph keeps pointing at the buffer it was recorded with, so a larger need makes a new buffer (twice
// the largest of that name, to bound their number) and the old ones live as long as the backend. Being internal,
// it is made even inside a capture, where user allocations are refused.
Buffer* CpuBackend::scratch_buffer(const char* name, size_t need) {
    size_t largest = 0;
    for (const auto& b : buffers_) {
        if (b->name != name) continue;
        largest = std::max(largest, b->bytes);
        if (b->bytes >= need) return b.get();
    }
    return do_alloc(std::max(need, 2 * largest), name);
}

// Thread i's slice of a scratch buffer: the buffer split evenly between the pool's threads, whatever one op needs,
// so that slice i is the same bytes for every op using the buffer. (Slices sized by each op's need overlapped:
// in a phase of two quantized matmuls of different activation sizes, thread 1's slice of the second lay inside
// thread 0's of the first, which thread 0 could still be reading.) At least the need, 64-byte aligned.
namespace {
size_t scratch_slice_bytes(const Buffer& b, int threads) { return b.bytes / static_cast<size_t>(threads) / 64 * 64; }
}  // namespace

// ---- ops ----

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
    require(dst.nbytes() == src.nbytes() && dst.rows == src.rows, "copy", "size mismatch '" + src.name() + "' -> '" + dst.name() + "'");
    if (dst.rows == 0) return;
    submit(run_copy,
           CopyArgs{static_cast<const char*>(src.raw()), static_cast<char*>(dst.raw()),
                    static_cast<int64_t>(dst.nbytes()) / dst.rows},
           Footprint().read(src).write(dst), dst.rows);
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
    require_dtype(ids, DType::I32, "embedding");
    require_dtype(out, DType::F32, "embedding");
    require(is_float_weight(table.dtype) || dtype_is_quantized(table.dtype), "embedding",
            "table '" + table.name() + "' must be f32/bf16/f16 or a quantized type, not " +
                std::string(dtype_name(table.dtype)));
    require(out.rows == ids.numel() && out.cols == table.cols, "embedding", "shape mismatch");
    submit(run_embedding,
           EmbeddingArgs{ids.ptr<int32_t>(), static_cast<const char*>(table.raw()), out.ptr<float>(), table.rows,
                         table.cols, static_cast<int64_t>(table.row_bytes()), table.dtype},
           Footprint().read(ids).read(table).write(out), out.rows);
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
    require_dtype(x, DType::F32, "rms_norm");
    require_dtype(out, DType::F32, "rms_norm");
    require(is_float_weight(w.dtype) && w.numel() == x.cols, "rms_norm", "weight '" + w.name() + "' length mismatch");
    require(out.rows == x.rows && out.cols == x.cols, "rms_norm", "shape mismatch");
    submit(run_rms_norm, RmsNormArgs{x.ptr<float>(), w.raw(), out.ptr<float>(), x.cols, eps, w.dtype},
           Footprint().read(x).read(w).write(out), x.rows);
}

void CpuBackend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
    require_dtype(x, DType::F32, "matmul");
    require_dtype(out, DType::F32, "matmul");
    require(is_float_weight(w.dtype) || dtype_is_quantized(w.dtype), "matmul",
            "weight '" + w.name() + "' must be f32/bf16/f16 or a quantized type, not " +
                std::string(dtype_name(w.dtype)));
    require(dtype_row_ok(w.dtype, w.cols), "matmul",
            "weight '" + w.name() + "' rows of " + std::to_string(w.cols) + " are not whole " +
                std::string(dtype_name(w.dtype)) + " blocks");
    require(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "matmul",
            "shape mismatch for weight '" + w.name() + "'");
    if (bias != nullptr) {
        require_dtype(*bias, DType::F32, "matmul");
        require(bias->numel() == w.rows, "matmul", "bias length mismatch");
    }
    const float* bias_ptr = bias ? bias->ptr<float>() : nullptr;
    const Footprint fp =
        bias ? Footprint().read(x).read(w).read(*bias).write(out) : Footprint().read(x).read(w).write(out);
    if (!dtype_is_quantized(w.dtype)) {
        submit(run_matmul,
               MatmulArgs{x.ptr<float>(), w.raw(), bias_ptr, out.ptr<float>(), x.rows, x.cols, w.rows, w.dtype}, fp,
               w.rows, kMatmulRowGrain, matmul_row_chunk(x.cols, w.dtype));
        return;
    }
    const size_t need = (matmul_quant_act_bytes(w.dtype, x.rows, x.cols) + 63) / 64 * 64;
    Buffer* scratch = scratch_buffer(kQuantScratchName, need * static_cast<size_t>(threads()));
    const size_t stride = scratch_slice_bytes(*scratch, threads());
    // The scratch stays out of the footprint: item i runs on thread i and uses slice i only, so two
    // matmuls sharing a phase never touch each other's slices from different threads.
    submit(run_quant_matmul,
           QuantMatmulArgs{x.ptr<float>(), w.raw(), bias_ptr, out.ptr<float>(), static_cast<char*>(scratch->data),
                           x.rows, x.cols, w.rows, static_cast<int64_t>(stride), threads(), w.dtype},
           fp, threads());
}

const CpuBackend::RopeTable& CpuBackend::rope_table(int head_dim, const RopeSpec& rope) {
    for (const RopeTable& t : rope_tables_)
        if (t.head_dim == head_dim && t.theta == rope.theta && std::ranges::equal(t.factors, rope.factors)) return t;
    RopeTable& t = rope_tables_.emplace_back();
    t.head_dim = head_dim;
    t.theta = rope.theta;
    t.factors.assign(rope.factors.begin(), rope.factors.end());
    t.theta_scale = rope_theta_scale(rope.theta, head_dim);
    return t;
}

void CpuBackend::rope_neox(const Tensor& x, const Tensor& positions, int heads, int head_dim, const RopeSpec& rope) {
    checks::rope_neox(x, positions, heads, head_dim, rope, kMaxHeadDim);
    const RopeTable& t = rope_table(head_dim, rope);
    submit(run_rope,
           RopeArgs{x.ptr<float>(), positions.ptr<int32_t>(), t.factors_or_null(), t.theta_scale, heads, head_dim},
           Footprint().read(positions).write(x), x.rows);
}

void CpuBackend::kv_write(const Tensor& k, const Tensor& v, const Tensor& slot_mapping, const Tensor& k_cache,
                          const Tensor& v_cache) {
    checks::kv_write(k, v, slot_mapping, k_cache, v_cache);
    submit(run_kv_write,
           KvWriteArgs{k.ptr<float>(), v.ptr<float>(), slot_mapping.ptr<int32_t>(), k_cache.raw(), v_cache.raw(),
                       k.cols, k_cache.rows, k_cache.dtype == DType::F16},
           Footprint().read(k).read(v).read(slot_mapping).write(k_cache).write(v_cache), k.rows);
}

void CpuBackend::attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionMeta& meta,
                           int heads, int kv_heads, int head_dim, float scale, const Tensor& out) {
    const PagedAttentionArgs a =
        attention_args(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, scale, out, "attention");
    const Footprint fp = attention_footprint(q, k_cache, v_cache, meta, out);
    if (k_cache.dtype == DType::F32) {
        submit(paged_attention_range, a, fp, q.rows * heads);
        return;
    }
    // The workspace stays out of the footprint for the reason the quantized matmul's scratch does: item i runs
    // on thread i and uses slice i only.
    const int64_t need = f16_attention_workspace_floats(meta.block_tables.cols * meta.block_size, head_dim);
    Buffer* ws = scratch_buffer(kAttentionScratchName, static_cast<size_t>(need * threads()) * sizeof(float));
    const auto floats = static_cast<int64_t>(scratch_slice_bytes(*ws, threads()) / sizeof(float));
    submit(paged_attention_f16_range,
           F16AttentionArgs{a, active_kernels().f16_attention, static_cast<float*>(ws->data), floats, q.rows,
                            threads(), meta.interleaved_pairs},
           fp, threads());
}

void CpuBackend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
    for (const Tensor* t : {&a, &b, &out}) require_dtype(*t, DType::F32, "add");
    require(a.numel() == b.numel() && a.numel() == out.numel(), "add", "shape mismatch");
    submit(run_add, BinaryArgs{a.ptr<float>(), b.ptr<float>(), out.ptr<float>()}, Footprint().read(a).read(b).write(out),
           out.numel(), 1024);
}

void CpuBackend::silu_mul(const Tensor& gate, const Tensor& up, const Tensor& out) {
    for (const Tensor* t : {&gate, &up, &out}) require_dtype(*t, DType::F32, "silu_mul");
    require(gate.numel() == up.numel() && gate.numel() == out.numel(), "silu_mul", "shape mismatch");
    submit(run_silu_mul, SiluMulArgs{gate.ptr<float>(), up.ptr<float>(), out.ptr<float>(), gate.cols},
           Footprint().read(gate).read(up).write(out), out.numel(), 1024);
}

void CpuBackend::matmuls(const Tensor& x, std::span<const MatmulOut> outs) {
    checks::matmuls(outs);
    // Separate recorded ops: they read the same input and write disjoint outputs, so barrier elision
    // already runs them in one phase.
    for (const MatmulOut& o : outs) matmul(x, *o.w, o.bias, o.out);
}

void CpuBackend::add_rms_norm(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out) {
    checks::add_rms_norm(x, delta, w, out);
    submit(run_add_rms_norm,
           AddRmsNormArgs{x.ptr<float>(), delta.ptr<float>(), w.raw(), out.ptr<float>(), x.cols, eps, w.dtype},
           Footprint().read(delta).read(w).write(x).write(out), x.rows);
}

void CpuBackend::qk_norm_rope_kv_write(const QkvPrologue& p) {
    checks::qk_norm_rope_kv_write(p, kMaxHeadDim);
    Footprint fp;
    fp.read(p.v).read(p.positions).read(p.slot_mapping).write(p.q).write(p.k).write(p.k_cache).write(p.v_cache);
    if (p.q_norm != nullptr) fp.read(*p.q_norm).read(*p.k_norm);
    const RopeTable& rope = rope_table(p.head_dim, p.rope);
    submit(run_qkv_prologue,
           QkvPrologueArgs{p.q.ptr<float>(), p.k.ptr<float>(), p.v.ptr<float>(), p.q_norm ? p.q_norm->raw() : nullptr,
                           p.k_norm ? p.k_norm->raw() : nullptr, p.positions.ptr<int32_t>(), rope.factors_or_null(),
                           rope.theta_scale, p.slot_mapping.ptr<int32_t>(), p.k_cache.raw(), p.v_cache.raw(),
                           p.k_cache.rows, p.eps, p.q_norm ? p.q_norm->dtype : DType::F32, p.heads, p.kv_heads,
                           p.head_dim, p.k_cache.dtype == DType::F16},
           fp, p.q.rows);
}

void CpuBackend::silu_mul_matmul(const Tensor& gate, const Tensor& up, const Tensor& w, const Tensor& out) {
    // Two recorded ops: a matvec thread needs the whole activation vector, so the product is formed first
    // (in gate, which the interface lets us consume) behind one barrier.
    silu_mul(gate, up, gate);
    matmul(gate, w, nullptr, out);
}

void CpuBackend::gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out) {
    require_dtype(x, DType::F32, "gather_last");
    require_dtype(out, DType::F32, "gather_last");
    require_dtype(query_start_loc, DType::I32, "gather_last");
    require(out.cols == x.cols && query_start_loc.numel() >= out.rows + 1, "gather_last", "shape mismatch");
    submit(run_gather_last, GatherArgs{x.ptr<float>(), query_start_loc.ptr<int32_t>(), out.ptr<float>(), x.rows, x.cols},
           Footprint().read(x).read(query_start_loc).write(out), out.rows);
}

void CpuBackend::argmax(const Tensor& logits, const Tensor& ids) {
    require_dtype(logits, DType::F32, "argmax");
    require_dtype(ids, DType::I32, "argmax");
    require(ids.numel() == logits.rows && logits.cols > 0, "argmax", "shape mismatch");
    submit(run_argmax, ArgmaxArgs{logits.ptr<float>(), ids.ptr<int32_t>(), logits.cols},
           Footprint().read(logits).write(ids), logits.rows);
}

void CpuBackend::advance_decode(const Tensor& sampled, const DecodeState& st) {
    for (const Tensor* t : {&sampled, &st.token_ids, &st.positions, &st.slot_mapping, &st.seq_lens, &st.block_tables,
                            &st.step, &st.history})
        require_dtype(*t, DType::I32, "advance_decode");
    const int64_t S = st.token_ids.numel();
    require(sampled.numel() == S && st.positions.numel() == S && st.slot_mapping.numel() == S &&
                st.seq_lens.numel() == S && st.block_tables.rows == S && st.history.cols == S && st.block_size > 0,
            "advance_decode", "shape mismatch");
    submit(run_advance,
           AdvanceArgs{sampled.ptr<int32_t>(), st.token_ids.ptr<int32_t>(), st.positions.ptr<int32_t>(),
                       st.slot_mapping.ptr<int32_t>(), st.seq_lens.ptr<int32_t>(), st.block_tables.ptr<int32_t>(),
                       st.step.ptr<int32_t>(), st.history.ptr<int32_t>(), st.history.rows, static_cast<int>(S),
                       static_cast<int>(st.block_tables.cols), st.block_size},
           Footprint()
               .read(sampled)
               .read(st.block_tables)
               .write(st.token_ids)
               .write(st.positions)
               .write(st.slot_mapping)
               .write(st.seq_lens)
               .write(st.step)
               .write(st.history),
           1);
}

size_t CpuBackend::dsa_topk_workspace_bytes(int64_t, int64_t max_keys) const {
    // One scratch slot per pool thread, whatever the number of rows.
    return dsa::array_bytes(threads(), dsa::topk_cpu_slot_elems(max_keys), sizeof(uint32_t));
}

void CpuBackend::dsa_topk(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                          const DsaTopkWorkspace& ws, const Tensor& indices) {
    dsa::check_topk_args(scores, window_start, window_end, indices);
    dsa::check_topk_workspace(ws, scores.rows, scores.cols, dsa_topk_workspace_bytes(ws.max_rows, ws.max_keys));
    if (scores.rows == 0) return;
    submit(dsa::topk_cpu_range,
           dsa::TopkCpuArgs{scores.ptr<float>(), window_start.ptr<int64_t>(), window_end.ptr<int64_t>(),
                            indices.ptr<int64_t>(), static_cast<uint32_t*>(ws.buffer->data), scores.rows, scores.cols,
                            indices.cols, dsa::topk_cpu_slot_elems(ws.max_keys), threads(), active_isa()},
           Footprint()
               .read(scores)
               .read(window_start)
               .read(window_end)
               .write(indices)
               .write(ByteRange{reinterpret_cast<uintptr_t>(ws.buffer->data),
                                reinterpret_cast<uintptr_t>(ws.buffer->data) + ws.buffer->bytes}),
           threads());
}

void CpuBackend::dsa_indexer(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads,
                             const Tensor& scores) {
    dsa::check_indexer_args(q, weights, keys, heads, scores);
    submit(dsa::indexer_range,
           dsa::IndexerArgs{q.ptr<float>(), weights.ptr<float>(), keys.ptr<float>(), scores.ptr<float>(), keys.rows,
                            heads, keys.cols},
           Footprint().read(q).read(weights).read(keys).write(scores), scores.numel(), 16);
}

void CpuBackend::sparse_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                  const AttentionMeta& meta, const Tensor& indices, int heads, int kv_heads,
                                  int head_dim, float scale, const Tensor& out) {
    const PagedAttentionArgs a =
        attention_args(q, k_cache, v_cache, meta, heads, kv_heads, head_dim, scale, out, "sparse_attention");
    require(k_cache.dtype == DType::F32, "sparse_attention", "needs an f32 KV cache");
    require_dtype(indices, DType::I64, "sparse_attention");
    require(indices.rows == q.rows, "sparse_attention", "indices need one row per query row");
    submit(dsa::sparse_attention_range, dsa::SparseAttentionArgs{a, indices.ptr<int64_t>(), indices.cols},
           attention_footprint(q, k_cache, v_cache, meta, out).read(indices), q.rows * heads);
}

}  // namespace tracelm::cpu
