#include "ops/dsa/dsa_indexer.h"

#include <stdexcept>
#include <string>

#include "runtime/backend.h"
#include "runtime/op_checks.h"

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

void check_indexer_paged_args(const Tensor& q, const Tensor& weights, const Tensor& key_cache,
                              const AttentionMeta& meta, int heads, const Tensor& scores) {
    const char* op = "dsa_indexer_paged";
    for (const Tensor* t : {&q, &weights, &key_cache, &scores}) checks::require_dtype(*t, DType::F32, op);
    checks::attention_meta(meta, op);
    checks::require(meta.window == 0, op, "a sliding window is not supported");
    checks::require(heads > 0 && key_cache.cols > 0 && q.cols == heads * key_cache.cols && weights.rows == q.rows &&
                        weights.cols == heads && scores.rows == q.rows,
                    op,
                    "shape mismatch: q [" + std::to_string(q.rows) + ", " + std::to_string(q.cols) + "], weights [" +
                        std::to_string(weights.rows) + ", " + std::to_string(weights.cols) + "], key_cache [" +
                        std::to_string(key_cache.rows) + ", " + std::to_string(key_cache.cols) + "], scores [" +
                        std::to_string(scores.rows) + ", " + std::to_string(scores.cols) + "] for " +
                        std::to_string(heads) + " heads");
}

}  // namespace tracelm::dsa

namespace tracelm {

// The entry points of the DSA indexer ops, here beside its checks (runtime/backend.h).
void Backend::dsa_indexer(const Tensor& q, const Tensor& weights, const Tensor& keys, int heads, const Tensor& scores) {
    dsa::check_indexer_args(q, weights, keys, heads, scores);
    do_dsa_indexer(q, weights, keys, heads, scores);
}

void Backend::dsa_indexer_paged(const Tensor& q, const Tensor& weights, const Tensor& key_cache,
                                const AttentionMeta& meta, int heads, const Tensor& scores) {
    dsa::check_indexer_paged_args(q, weights, key_cache, meta, heads, scores);
    do_dsa_indexer_paged(q, weights, key_cache, meta, heads, scores);
}

}  // namespace tracelm
