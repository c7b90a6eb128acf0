#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/ops/op_support.h"

namespace tracelm::cpu {

namespace {

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
    int64_t vocab, dim;
    DType dt;
    float scale;
};
void run_embedding(const EmbeddingArgs& a, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
        const int32_t id = a.ids[t];
        float* out = a.out + t * a.dim;
        if (id < 0 || id >= a.vocab) {
            std::fill(out, out + a.dim, 0.0f);
        } else {
            table_row_to_f32(a.table, a.dt, a.vocab, a.dim, id, out);
            if (a.scale != 1.0f)
                for (int64_t c = 0; c < a.dim; ++c) out[c] *= a.scale;
        }
    }
}

struct BinaryArgs {
    const float* a;
    const float* b;
    float* out;
};
void run_add(const BinaryArgs& a, int64_t b, int64_t e) { add(a.a, a.b, a.out, b, e); }

struct GluArgs {
    const float* gate;
    const float* up;
    float* out;
    int64_t cols;
    Activation act;
};
void run_glu(const GluArgs& a, int64_t b, int64_t e) {
    if (a.act == Activation::Silu) {
        silu_mul(a.gate, a.up, a.out, a.cols, b, e);
    } else {
        gelu_mul(a.gate, a.up, a.out, a.act == Activation::GeluTanhF16, b, e);
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

}  // namespace

void CpuBackend::do_copy(const Tensor& dst, const Tensor& src) {
    if (dst.rows == 0) return;
    submit(run_copy,
           CopyArgs{static_cast<const char*>(src.raw()), static_cast<char*>(dst.raw()),
                    static_cast<int64_t>(dst.nbytes()) / dst.rows},
           Footprint().read(src).write(dst), dst.rows);
}

void CpuBackend::do_embedding(const Tensor& ids, const Tensor& table, float scale, const Tensor& out) {
    submit(run_embedding,
           EmbeddingArgs{ids.ptr<int32_t>(), static_cast<const char*>(table.raw()), out.ptr<float>(), table.rows,
                         table.cols, table.dtype, scale},
           Footprint().read(ids).read(table).write(out), out.rows);
}

void CpuBackend::do_add(const Tensor& a, const Tensor& b, const Tensor& out) {
    submit(run_add, BinaryArgs{a.ptr<float>(), b.ptr<float>(), out.ptr<float>()}, Footprint().read(a).read(b).write(out),
           out.numel(), 1024);
}

void CpuBackend::do_glu(const Tensor& gate, const Tensor& up, Activation act, const Tensor& out) {
    submit(run_glu, GluArgs{gate.ptr<float>(), up.ptr<float>(), out.ptr<float>(), gate.cols, act},
           Footprint().read(gate).read(up).write(out), out.numel(), 1024);
}

void CpuBackend::do_gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out) {
    submit(run_gather_last, GatherArgs{x.ptr<float>(), query_start_loc.ptr<int32_t>(), out.ptr<float>(), x.rows, x.cols},
           Footprint().read(x).read(query_start_loc).write(out), out.rows);
}

}  // namespace tracelm::cpu
