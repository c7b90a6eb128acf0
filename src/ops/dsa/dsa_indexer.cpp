#include "ops/dsa/dsa_indexer.h"

#include <stdexcept>
#include <string>

#include "backends/cpu/kernels/kernels.h"

namespace tracelm::dsa {

void indexer_range(const IndexerArgs& a, int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / a.num_keys;
        const float* k = a.keys + item % a.num_keys * a.dim;
        const float* q = a.q + t * a.heads * a.dim;
        const float* w = a.weights + t * a.heads;
        float score = 0.0f;
        for (int64_t h = 0; h < a.heads; ++h) {
            const float dot = cpu::dot_f32(q + h * a.dim, k, a.dim);
            if (dot > 0.0f) score += w[h] * dot;
        }
        a.scores[item] = score;
    }
}

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
