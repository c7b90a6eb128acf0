#include "ops/moe/moe.h"

#include <stdexcept>
#include <string>

namespace tracelm::moe {

namespace {

[[noreturn]] void bad(const char* op, const std::string& what) { throw std::invalid_argument(std::string(op) + ": " + what); }

std::string shape(const Tensor& t) { return "'" + t.name() + "' [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "]"; }

void need(const char* op, const Tensor& t, DType dt) {
    if (t.dtype != dt)
        bad(op, "tensor '" + t.name() + "' has dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                    std::string(dtype_name(dt)));
}

}  // namespace

void check_route_args(const Tensor& x, const Tensor& router, int64_t batch_rows, const Tensor& logits,
                      const Tensor& ids, const Tensor& weights) {
    need("moe_route", x, DType::F32);
    need("moe_route", router, DType::F32);
    if (batch_rows < 1) bad("moe_route", "batch_rows " + std::to_string(batch_rows) + " < 1");
    if (router.cols != x.cols || logits.rows != x.rows || logits.cols != router.rows)
        bad("moe_route", "x " + shape(x) + ", router " + shape(router) + " and logits " + shape(logits) + " disagree");
    need("moe_route", logits, DType::F32);
    need("moe_route", ids, DType::I32);
    need("moe_route", weights, DType::F32);
    if (ids.rows != logits.rows || weights.rows != logits.rows || ids.cols != weights.cols || ids.cols < 1 ||
        ids.cols > logits.cols)
        bad("moe_route", "logits " + shape(logits) + ", ids " + shape(ids) + " and weights " + shape(weights) +
                             " do not give 1 <= k <= experts for every row");
}

void check_route_grouped_args(const Tensor& x, const Tensor& router, const Tensor& bias, int n_group, int topk_group,
                              const Tensor& logits, const Tensor& ids, const Tensor& weights) {
    const char* op = "moe_route_grouped";
    for (const Tensor* t : {&x, &router, &bias, &logits, &weights}) need(op, *t, DType::F32);
    need(op, ids, DType::I32);
    const int64_t E = router.rows;
    if (router.cols != x.cols || logits.rows != x.rows || logits.cols != E || bias.numel() != E)
        bad(op, "x " + shape(x) + ", router " + shape(router) + ", bias " + shape(bias) + " and logits " +
                    shape(logits) + " disagree");
    if (n_group < 1 || E % n_group != 0 || E / n_group < 2 || topk_group < 1 || topk_group > n_group)
        bad(op, std::to_string(E) + " experts in " + std::to_string(n_group) + " groups keeping " +
                    std::to_string(topk_group) + ": need groups of at least 2 experts and 1 <= topk_group <= n_group");
    if (ids.rows != x.rows || weights.rows != x.rows || ids.cols != weights.cols || ids.cols < 1 ||
        ids.cols > topk_group * (E / n_group))
        bad(op, "ids " + shape(ids) + " and weights " + shape(weights) + " do not give 1 <= k <= the " +
                    std::to_string(topk_group * (E / n_group)) + " experts of the kept groups for every row");
}

void check_ffn_args(const Tensor& x, const Tensor& ids, const Tensor& weights, const MoeExperts& e,
                    const Tensor& out, int64_t batch_rows) {
    need("moe_ffn", x, DType::F32);
    need("moe_ffn", ids, DType::I32);
    need("moe_ffn", weights, DType::F32);
    need("moe_ffn", out, DType::F32);
    if (!e.gate || !e.up || !e.down || e.count < 1) bad("moe_ffn", "the experts' gate, up and down weights are missing");
    const Tensor &g = *e.gate, &u = *e.up, &d = *e.down;
    const int64_t H = x.cols, I = g.rows / e.count;
    if (g.rows % e.count != 0 || I < 1 || u.rows != g.rows || g.cols != H || u.cols != H || d.rows != e.count * H ||
        d.cols != I || g.dtype != u.dtype || g.dtype != d.dtype)
        bad("moe_ffn", "gate " + shape(g) + ", up " + shape(u) + " and down " + shape(d) + " are not " +
                           std::to_string(e.count) + " experts' [I, " + std::to_string(H) + "], [I, " +
                           std::to_string(H) + "] and [" + std::to_string(H) + ", I] of one dtype");
    if (ids.rows != x.rows || weights.rows != x.rows || ids.cols != weights.cols || ids.cols < 1 ||
        out.rows != x.rows || out.cols != H)
        bad("moe_ffn", "x " + shape(x) + ", ids " + shape(ids) + ", weights " + shape(weights) + " and out " +
                           shape(out) + " disagree");
    if (batch_rows < 1) bad("moe_ffn", "batch_rows " + std::to_string(batch_rows) + " < 1");
    if (ggml_has_tiled_order(g.dtype) && batch_rows > 1 && batch_rows != x.rows)
        bad("moe_ffn", std::string(dtype_name(g.dtype)) + " experts over " + std::to_string(x.rows) +
                           " rows of a forward of " + std::to_string(batch_rows) +
                           ": their order comes from each expert's rows in the whole forward");
}

}  // namespace tracelm::moe

namespace tracelm {

// The entry points of the MoE ops, here beside their checks (runtime/backend.h).
void Backend::moe_route(const Tensor& x, const Tensor& router, int64_t batch_rows, bool normalize,
                        const Tensor& logits, const Tensor& ids, const Tensor& weights) {
    moe::check_route_args(x, router, batch_rows, logits, ids, weights);
    do_moe_route(x, router, batch_rows, normalize, logits, ids, weights);
}

void Backend::moe_route_grouped(const Tensor& x, const Tensor& router, const Tensor& bias, int n_group, int topk_group,
                                bool normalize, float scaling, const Tensor& logits, const Tensor& ids,
                                const Tensor& weights) {
    moe::check_route_grouped_args(x, router, bias, n_group, topk_group, logits, ids, weights);
    do_moe_route_grouped(x, router, bias, n_group, topk_group, normalize, scaling, logits, ids, weights);
}

void Backend::moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, const MoeExperts& experts,
                      const Tensor& out, int64_t batch_rows) {
    moe::check_ffn_args(x, ids, weights, experts, out, batch_rows);
    do_moe_ffn(x, ids, weights, experts, out, batch_rows);
}

}  // namespace tracelm
