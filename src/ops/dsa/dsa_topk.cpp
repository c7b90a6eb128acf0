#include "ops/dsa/dsa_topk.h"

#include <stdexcept>
#include <string>

#include "ops/attention/attention.h"
#include "runtime/op_checks.h"

namespace tracelm::dsa {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("dsa_topk: " + what); }

// Messages are only built on failure, so a valid call allocates nothing (the op may run every decode step).
void expect_dtype(const Tensor& t, DType dt, const char* role) {
    if (t.dtype != dt) {
        fail(std::string(role) + " '" + t.name() + "' has dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
             std::string(dtype_name(dt)));
    }
}

// What dsa_topk and dsa_topk_causal check alike: the scores, the indices, and the count of windows given.
void check_scores_indices(const Tensor& scores, const Tensor& indices, int64_t window_starts, int64_t window_ends) {
    expect_dtype(scores, DType::F32, "scores");
    expect_dtype(indices, DType::I64, "indices");
    check_topk_args(scores.rows, scores.cols, indices.cols, window_starts, window_ends);
    if (indices.rows != scores.rows) {
        fail("indices has " + std::to_string(indices.rows) + " rows for " + std::to_string(scores.rows) +
             " rows of scores");
    }
}

}  // namespace

size_t array_bytes(int64_t rows, int64_t cols, size_t elem) {
    size_t n = 0;
    if (rows < 0 || cols < 0 || __builtin_mul_overflow(static_cast<size_t>(rows), static_cast<size_t>(cols), &n) ||
        __builtin_mul_overflow(n, elem, &n)) {
        fail(std::to_string(rows) + " x " + std::to_string(cols) + " elements do not fit in memory");
    }
    return n;
}

void check_topk_args(int64_t rows, int64_t keys, int64_t topk, int64_t window_starts, int64_t window_ends) {
    if (topk <= 0) fail("topk must be positive, got " + std::to_string(topk));
    if (keys < 0) fail("the number of keys must not be negative, got " + std::to_string(keys));
    if (rows < 0) fail("the number of rows must not be negative, got " + std::to_string(rows));
    if (window_starts != rows || window_ends != rows) {
        fail("window_start and window_end need one entry per row: " + std::to_string(rows) + " rows, " +
             std::to_string(window_starts) + " starts, " + std::to_string(window_ends) + " ends");
    }
}

void check_topk_args(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                     const Tensor& indices) {
    expect_dtype(window_start, DType::I64, "window_start");
    expect_dtype(window_end, DType::I64, "window_end");
    check_scores_indices(scores, indices, window_start.numel(), window_end.numel());
}

void check_topk_causal_args(const Tensor& scores, const AttentionMeta& meta, const Tensor& indices) {
    check_scores_indices(scores, indices, scores.rows, scores.rows);
    checks::attention_meta(meta, "dsa_topk");
    if (meta.window != 0) fail("a sliding window is not supported");
}

void check_topk_workspace(const DsaTopkWorkspace& ws, int64_t rows, int64_t keys, size_t bytes) {
    if (ws.buffer == nullptr) fail("no workspace (make one with dsa::make_topk_workspace)");
    if (ws.buffer->bytes < bytes || rows > ws.max_rows || keys > ws.max_keys) {
        fail("workspace '" + ws.buffer->name + "' made for up to " + std::to_string(ws.max_rows) + " rows of " +
             std::to_string(ws.max_keys) + " keys cannot serve " + std::to_string(rows) + " rows of " +
             std::to_string(keys) + " keys");
    }
}

DsaTopkWorkspace make_topk_workspace(Backend& backend, int64_t max_rows, int64_t max_keys) {
    if (max_rows < 0 || max_keys < 0) fail("workspace sizes must not be negative");
    DsaTopkWorkspace ws;
    ws.buffer = backend.alloc(backend.dsa_topk_workspace_bytes(max_rows, max_keys), "dsa_topk workspace");
    ws.max_rows = max_rows;
    ws.max_keys = max_keys;
    return ws;
}

void check_case(const TopkCase& c) {
    check_topk_args(c.rows, c.keys, c.topk, static_cast<int64_t>(c.window_start.size()),
                    static_cast<int64_t>(c.window_end.size()));
    if (c.scores.size() * sizeof(float) != array_bytes(c.rows, c.keys, sizeof(float))) {
        fail(std::to_string(c.scores.size()) + " scores for " + std::to_string(c.rows) + " rows of " +
             std::to_string(c.keys) + " keys");
    }
}

TopkRunner::TopkRunner(Backend& backend, int64_t max_rows, int64_t max_keys, int64_t max_topk)
    : backend_(backend), max_rows_(max_rows), max_keys_(max_keys), max_topk_(max_topk) {
    scores_ = backend.alloc(array_bytes(max_rows, max_keys, sizeof(float)), "dsa_topk scores");
    window_start_ = backend.alloc(array_bytes(max_rows, 1, sizeof(int64_t)), "dsa_topk window_start");
    window_end_ = backend.alloc(array_bytes(max_rows, 1, sizeof(int64_t)), "dsa_topk window_end");
    indices_ = backend.alloc(array_bytes(max_rows, max_topk, sizeof(int64_t)), "dsa_topk indices");
    workspace_ = make_topk_workspace(backend, max_rows, max_keys);
}

TopkRunner::~TopkRunner() {
    for (Buffer* b : {scores_, window_start_, window_end_, indices_, workspace_.buffer}) backend_.free(b);
}

std::vector<int64_t> TopkRunner::run(const TopkCase& c) {
    check_case(c);
    if (c.rows > max_rows_ || c.keys > max_keys_ || c.topk > max_topk_) {
        fail("a case of " + std::to_string(c.rows) + " rows of " + std::to_string(c.keys) + " keys with topk " +
             std::to_string(c.topk) + " exceeds the runner's " + std::to_string(max_rows_) + " rows of " +
             std::to_string(max_keys_) + " keys with topk " + std::to_string(max_topk_));
    }
    std::vector<int64_t> out(static_cast<size_t>(c.rows * c.topk));
    if (c.rows == 0) return out;
    const Tensor scores = whole(scores_, DType::F32, c.rows, c.keys);
    const Tensor start = whole(window_start_, DType::I64, c.rows, 1);
    const Tensor end = whole(window_end_, DType::I64, c.rows, 1);
    const Tensor indices = whole(indices_, DType::I64, c.rows, c.topk);
    if (c.keys > 0) backend_.upload(scores, c.scores.data());
    backend_.upload(start, c.window_start.data());
    backend_.upload(end, c.window_end.data());
    backend_.dsa_topk(scores, start, end, workspace_, indices);
    backend_.download(indices, out.data());
    return out;
}

}  // namespace tracelm::dsa

namespace tracelm {

// The entry points of the DSA top-k ops, here beside its checks (runtime/backend.h).
void Backend::dsa_topk(const Tensor& scores, const Tensor& window_start, const Tensor& window_end,
                       const DsaTopkWorkspace& ws, const Tensor& indices) {
    dsa::check_topk_args(scores, window_start, window_end, indices);
    dsa::check_topk_workspace(ws, scores.rows, scores.cols, dsa_topk_workspace_bytes(ws.max_rows, ws.max_keys));
    do_dsa_topk(scores, window_start, window_end, ws, indices);
}

void Backend::dsa_topk_causal(const Tensor& scores, const AttentionMeta& meta, const DsaTopkWorkspace& ws,
                              const Tensor& indices) {
    dsa::check_topk_causal_args(scores, meta, indices);
    dsa::check_topk_workspace(ws, scores.rows, scores.cols, dsa_topk_workspace_bytes(ws.max_rows, ws.max_keys));
    do_dsa_topk_causal(scores, meta, ws, indices);
}

}  // namespace tracelm
