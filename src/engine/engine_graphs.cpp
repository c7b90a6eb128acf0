// The engine's decode graphs: one captured graph per batch bucket, captured up front or on first use, and their
// replay timings.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

namespace tracelm {

bool Engine::captured() const {
    const auto it = graphs_.find(last_bucket_);
    return it != graphs_.end() && it->second.graph >= 0;
}

size_t Engine::graph_ops() const { return captured() ? backend_.graph_nodes(graphs_.at(last_bucket_).graph) : 0; }

std::vector<int> Engine::buckets() const {
    std::vector<int> out;
    for (int b = 1; b <= max_rows_; b = batch_bucket(b + 1)) out.push_back(b);
    return out;
}

void Engine::capture(BucketGraph& g) {
    backend_.begin_capture();
    try {
        issue_decode_step();
    } catch (...) {
        // The op's error is the one to report; the partial graph is dropped.
        try {
            backend_.destroy_graph(backend_.end_capture());
        } catch (...) {
        }
        throw;
    }
    g.graph = backend_.end_capture();
}

bool Engine::uses_graphs() const { return opt_.capture && backend_.supports_capture(); }

void Engine::capture_buckets() {
    if (!uses_graphs()) return;
    if (std::any_of(rows_.begin(), rows_.end(), [](const Row& r) { return r.admitted; })) {
        throw std::logic_error("capture_buckets() with admitted sequences");
    }
    // Every row is inert (the constructor, or the last release), so the warm-up steps write no KV, and the decode
    // state they advance is reset afterwards.
    for (const int b : buckets()) {
        BucketGraph& g = graphs_[b];
        bucket_ = b;
        if (g.graph < 0) {
            issue_decode_step();
            g.warmed = true;
            capture(g);
        }
        // Two timed replays (the first may still find cold caches): a scheduler's cost of this bucket's step before
        // any traffic. They write no KV, as the warm-up did not.
        for (int i = 0; i < 2; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            backend_.replay(g.graph);
            g.replay_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
    }
    bucket_ = 0;
    make_rows_inert();
}

void Engine::touch_kv() {
    if (cache_->free_count() != cache_->num_blocks() ||
        (sliding_cache_ && sliding_cache_->free_count() != sliding_cache_->num_blocks())) {
        throw std::logic_error("touch_kv() with KV blocks in use or cached");
    }
    std::vector<unsigned char> zeros;
    for (const Tensor& t : kv_->pools()) {
        const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>((size_t{1} << 20) / t.row_bytes()));
        zeros.resize(static_cast<size_t>(rows) * t.row_bytes());
        for (int64_t r = 0; r < t.rows; r += rows) {
            const Tensor part = t.slice_rows(r, std::min(rows, t.rows - r));
            backend_.upload(part, zeros.data());
        }
    }
}

double Engine::replay_seconds(int bucket) const {
    const auto it = graphs_.find(bucket);
    return it == graphs_.end() ? 0.0 : it->second.replay_seconds;
}

}  // namespace tracelm
