// The matmul family's entry points: arguments checked once, then the backend's do_<op>.
#include "ops/matmul/matmul.h"

#include <string>

#include "runtime/backend.h"
#include "runtime/op_checks.h"

namespace tracelm {

using checks::require;
using checks::require_dtype;

namespace {

void check_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out, const char* op,
                  const BackendCapabilities& caps) {
    require_dtype(x, DType::F32, op);
    require_dtype(out, DType::F32, op);
    checks::weight(w, op, caps);
    require(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, op,
            "shape mismatch for weight '" + w.name() + "'");
    if (bias != nullptr) {
        require_dtype(*bias, DType::F32, op);
        require(bias->numel() == w.rows, op, "bias length mismatch");
    }
}

}  // namespace

void Backend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out, int64_t batch_rows) {
    check_matmul(x, w, bias, out, "matmul", capabilities());
    require(batch_rows >= 1, "matmul", "batch_rows must be at least 1");
    do_matmul(x, w, bias, out, batch_rows);
}

void Backend::matmuls(const Tensor& x, std::span<const MatmulOut> outs, int64_t batch_rows) {
    require(!outs.empty() && outs.size() <= kMaxMatmuls, "matmuls",
            "needs 1 to " + std::to_string(kMaxMatmuls) + " outputs");
    for (const MatmulOut& o : outs) {
        require(o.w != nullptr, "matmuls", "missing weight");
        check_matmul(x, *o.w, o.bias, o.out, "matmuls", capabilities());
    }
    require(batch_rows >= 1, "matmuls", "batch_rows must be at least 1");
    do_matmuls(x, outs, batch_rows);
}

void Backend::glu_matmul(const Tensor& gate, const Tensor& up, Activation act, const Tensor& w, const Tensor& out,
                         int64_t batch_rows) {
    checks::same_size_f32(gate, up, gate, "glu_matmul");
    require(up.rows == gate.rows, "glu_matmul", "shape mismatch");
    check_matmul(gate, w, nullptr, out, "glu_matmul", capabilities());
    require(batch_rows >= 1, "glu_matmul", "batch_rows must be at least 1");
    do_glu_matmul(gate, up, act, w, out, batch_rows);
}

}  // namespace tracelm
