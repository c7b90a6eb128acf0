#include "runtime/op_checks.h"

#include <stdexcept>

namespace tracelm::checks {

void require(bool ok, const char* op, const std::string& what) {
    if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

void require_dtype(const Tensor& t, DType dt, const char* op) {
    require(t.dtype == dt, op,
            "tensor '" + t.name() + "' has dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                std::string(dtype_name(dt)));
}

bool is_float_weight(DType dt) { return dt == DType::F32 || dt == DType::BF16 || dt == DType::F16; }

const std::vector<DType>& all_weight_types() {
    static const std::vector<DType> types = {DType::F32,  DType::BF16, DType::F16,  DType::Q8_0, DType::Q4_0,
                                             DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                                             DType::Q6_K, DType::Q8_0_R16, DType::Q4_0_R16, DType::Q4_1_R16,
                                             DType::Q5_0_R16, DType::Q5_1_R16, DType::Q4_K_R16, DType::Q5_K_R16,
                                             DType::Q6_K_R16};
    return types;
}

void weight(const Tensor& w, const char* op, const BackendCapabilities& caps) {
    require(caps.has_weight_type(w.dtype), op,
            "weight '" + w.name() + "' has type " + std::string(dtype_name(w.dtype)) + ", this backend runs " +
                BackendCapabilities::list(caps.weight_types));
    require(dtype_row_ok(w.dtype, w.cols), op,
            "weight '" + w.name() + "' rows of " + std::to_string(w.cols) + " are not whole " +
                std::string(dtype_name(w.dtype)) + " blocks");
}

void norm_weight(const Tensor& w, int64_t length, const char* op) {
    require(is_float_weight(w.dtype) && w.numel() == length, op, "weight '" + w.name() + "' length mismatch");
}

void kv_cache(const Tensor& k_cache, const Tensor& v_cache, const char* op, const BackendCapabilities& caps) {
    require(caps.has_kv_type(k_cache.dtype) && v_cache.dtype == k_cache.dtype, op,
            "the K and V caches must be of one type of " + BackendCapabilities::list(caps.kv_types) + ", not " +
                std::string(dtype_name(k_cache.dtype)) + " and " + std::string(dtype_name(v_cache.dtype)));
}

void same_size_f32(const Tensor& a, const Tensor& b, const Tensor& out, const char* op) {
    for (const Tensor* t : {&a, &b, &out}) require_dtype(*t, DType::F32, op);
    require(a.numel() == b.numel() && a.numel() == out.numel(), op, "shape mismatch");
}

}  // namespace tracelm::checks
