// The elementwise family's entry points: arguments checked once, then the backend's do_<op>.
#include "ops/elementwise/elementwise.h"

#include <cmath>

#include "runtime/backend.h"
#include "runtime/op_checks.h"

namespace tracelm {

using checks::require;
using checks::require_dtype;

void Backend::copy(const Tensor& dst, const Tensor& src) {
    require(dst.nbytes() == src.nbytes() && dst.rows == src.rows, "copy",
            "size mismatch '" + src.name() + "' -> '" + dst.name() + "'");
    do_copy(dst, src);
}

const char* activation_name(Activation a) {
    switch (a) {
        case Activation::Silu: return "silu";
        case Activation::GeluTanh: return "gelu_tanh";
        case Activation::GeluTanhF16: return "gelu_tanh (ggml's f16 table)";
    }
    return "?";
}

void Backend::embedding(const Tensor& ids, const Tensor& table, float scale, const Tensor& out) {
    require_dtype(ids, DType::I32, "embedding");
    require_dtype(out, DType::F32, "embedding");
    checks::weight(table, "embedding", capabilities());
    require(out.rows == ids.numel() && out.cols == table.cols, "embedding", "shape mismatch");
    require(std::isfinite(scale), "embedding", "scale must be finite");
    do_embedding(ids, table, scale, out);
}

void Backend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
    checks::same_size_f32(a, b, out, "add");
    do_add(a, b, out);
}

void Backend::glu(const Tensor& gate, const Tensor& up, Activation act, const Tensor& out) {
    checks::same_size_f32(gate, up, out, "glu");
    do_glu(gate, up, act, out);
}

void Backend::gather_last(const Tensor& x, const Tensor& query_start_loc, const Tensor& out) {
    require_dtype(x, DType::F32, "gather_last");
    require_dtype(out, DType::F32, "gather_last");
    require_dtype(query_start_loc, DType::I32, "gather_last");
    require(out.cols == x.cols && query_start_loc.numel() >= out.rows + 1, "gather_last", "shape mismatch");
    do_gather_last(x, query_start_loc, out);
}

}  // namespace tracelm
