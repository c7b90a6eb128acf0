#include "ops/dsa/dsa_indexer.h"

#include <stdexcept>
#include <string>

#include "runtime/backend.h"

namespace tracelm::dsa {

void check_indexer_args(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads, const Tensor& scores) {
    for (const Tensor* t : {&q, &weights, &keys, &scores}) {
        if (t->dtype != DType::F32) {
            throw std::invalid_argument("dsa_indexer: tensor '" + t->name() + "' has dtype " +
                                        std::string(dtype_name(t->dtype)) + ", expected f32");
        }
    }
    if (heads <= 0 || keys.cols <= 0 || q.cols != heads * keys.cols || weights.rows != q.rows ||
        weights.cols != heads || scores.rows != q.rows || scores.cols != keys.rows) {
        throw std::invalid_argument("dsa_indexer: shape mismatch: q [" + std::to_string(q.rows) + ", " +
                                    std::to_string(q.cols) + "], weights [" + std::to_string(weights.rows) + ", " +
                                    std::to_string(weights.cols) + "], keys [" + std::to_string(keys.rows) + ", " +
                                    std::to_string(keys.cols) + "], scores [" + std::to_string(scores.rows) + ", " +
                                    std::to_string(scores.cols) + "] for " + std::to_string(heads) + " heads");
    }
}

}  // namespace tracelm::dsa

namespace tracelm {

// The entry point of the DSA indexer op, here beside its checks (runtime/backend.h).
void Backend::dsa_indexer(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads, const Tensor& scores) {
    dsa::check_indexer_args(q, weights, keys, heads, scores);
    do_dsa_indexer(q, weights, keys, heads, scores);
}

}  // namespace tracelm
