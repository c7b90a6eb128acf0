// Prompt scoring: the log-probability of each prompt token given the ones before it (completions' echo with
// logprobs). A scoring row's prefill forwards also run the last layer over every row (Decoder::forward's all_rows);
// the LM head then gives a group of rows' logits, and sample() forced to each row's next prompt token reports that
// token's log-probability and the best ones, exactly as it reports a sampled token's. All of it on the device, in
// eager prefill forwards, outside any captured step.
#include <algorithm>

#include "engine/engine.h"

namespace tracelm {

void Engine::make_scoring() {
    if (scoring_) return;
    const int64_t G = kScoreRows, V = model_.config().vocab_size;
    Scoring s;
    buffers_.push_back(backend_.alloc(static_cast<size_t>(G * V) * sizeof(float), "scoring.logits"));
    s.logits = whole(buffers_.back(), DType::F32, G, V);
    s.ids = i32("scoring.ids", G);
    s.io.params = i32("scoring.params", G, sampling::kParamWords);
    s.io.counts = i32("scoring.counts", G, V);  // never read: scoring rows have no penalties
    s.io.step = i32("scoring.step", 1);
    s.io.top_ids = i32("scoring.top_ids", G, sampling::kMaxLogprobs);
    buffers_.push_back(backend_.alloc(static_cast<size_t>(G) * (1 + sampling::kMaxLogprobs) * sizeof(float),
                                      "scoring.logprobs"));
    s.io.logprobs = whole(buffers_.back(), DType::F32, G, 1 + sampling::kMaxLogprobs);
    s.io.ws = sampling::make_workspace(backend_, G, V);
    buffers_.push_back(s.io.ws.buffer);
    const int32_t zero = 0;
    backend_.upload(s.io.step, &zero);
    scoring_ = s;
}

void Engine::score_prompt(Row& r, int64_t c0, int64_t c1) {
    const Scoring& s = *scoring_;
    const int64_t end = std::min(c1, r.n - 1);  // row i predicts token i + 1
    const Tensor hidden = decoder_->all_hidden(static_cast<int>(c1 - c0));
    std::vector<sampling::RowParams> params(static_cast<size_t>(kScoreRows));
    std::vector<float> lp(static_cast<size_t>(kScoreRows) * (1 + sampling::kMaxLogprobs));
    std::vector<int32_t> top(static_cast<size_t>(kScoreRows) * sampling::kMaxLogprobs);
    for (int64_t g0 = c0; g0 < end; g0 += kScoreRows) {
        const int64_t g = std::min(kScoreRows, end - g0);
        for (int64_t i = 0; i < g; ++i) {
            sampling::RowParams& p = params[static_cast<size_t>(i)];
            p.logprobs = r.score_n;
            p.forced = r.tokens[static_cast<size_t>(g0 + i + 1)] + 1;
        }
        decoder_->lm_head(hidden.slice_rows(g0 - c0, g), s.logits.slice_rows(0, g));
        backend_.upload(s.io.params.slice_rows(0, g), params.data());
        SamplingIo io = s.io;
        io.params = s.io.params.slice_rows(0, g);
        io.counts = s.io.counts.slice_rows(0, g);
        io.logprobs = s.io.logprobs.slice_rows(0, g);
        io.top_ids = s.io.top_ids.slice_rows(0, g);
        backend_.sample(s.logits.slice_rows(0, g), io, s.ids.slice_rows(0, g));
        backend_.download(io.logprobs, lp.data());
        backend_.download(io.top_ids, top.data());
        for (int64_t i = 0; i < g; ++i) {
            sampling::TokenLogprobs& t = r.scores[static_cast<size_t>(g0 + i)];
            const float* row = lp.data() + i * (1 + sampling::kMaxLogprobs);
            t.id = r.tokens[static_cast<size_t>(g0 + i + 1)];
            t.logprob = row[0];
            t.top.clear();
            for (int j = 0; j < r.score_n; ++j) {
                const int32_t id = top[static_cast<size_t>(i * sampling::kMaxLogprobs + j)];
                if (id >= 0) t.top.emplace_back(id, row[1 + j]);
            }
        }
    }
}

std::vector<sampling::TokenLogprobs> Engine::take_prompt_logprobs(int row) {
    Row& r = rows_.at(static_cast<size_t>(row));
    if (r.score_n < 0 || r.computed < r.n) return {};
    r.score_n = -1;
    return std::move(r.scores);
}

}  // namespace tracelm
