// The engine's row API (engine.h, "Continuous batching"): admission with prefix sharing, prefill forwards, joins,
// KV block growth and release.
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tracelm {

namespace {

// How a sequence of an n-token prompt (with its `decoded` spans) and k generated tokens is computed, per position
// (Row::one_row): kOneRow for a forward of one row, kSeveral for one of at least kGgmlTiledMinRows rows, kFew for
// one of 2 to kGgmlTiledMinRows - 1 (llama.cpp sums some quantized weights differently there). The prompt's runs
// outside the decoded spans are prefilled in chunks cut at the run's start and end and at the multiples of C (so a
// prompt without decoded spans is cut where llama.cpp cuts it); decoded spans and generated tokens take one forward
// each. Throws std::invalid_argument on spans that are not ascending, disjoint, non-empty and before the prompt's
// last token.
constexpr uint8_t kSeveral = 0, kOneRow = 1, kFew = 2;
std::vector<uint8_t> plan_one_row(int64_t n, int64_t k, const std::vector<TokenSpan>& decoded, int64_t C) {
    std::vector<uint8_t> one_row(static_cast<size_t>(n + k), kOneRow);
    const auto prefill_run = [&](int64_t b, int64_t e) {
        for (int64_t c0 = b; c0 < e;) {
            const int64_t c1 = std::min(e, (c0 / C + 1) * C);
            if (c1 - c0 >= 2)
                std::fill(one_row.begin() + c0, one_row.begin() + c1, c1 - c0 >= kGgmlTiledMinRows ? kSeveral : kFew);
            c0 = c1;
        }
    };
    int64_t at = 0;
    for (const TokenSpan& d : decoded) {
        if (d.begin < at || d.end <= d.begin || d.end >= n) {
            throw std::invalid_argument("engine: decoded spans must be ascending, disjoint, non-empty and end before "
                                        "the prompt's last token");
        }
        prefill_run(at, d.begin);
        at = d.end;
    }
    prefill_run(at, n);
    return one_row;
}

}  // namespace

Tensor Engine::table_entries(int row, int64_t first, int64_t n) const {
    const Tensor flat = whole(block_tables_.buf, DType::I32, block_tables_.numel(), 1);
    return flat.slice_rows(static_cast<int64_t>(row) * max_blocks_ + first, n);
}

int32_t Engine::slot_of(const Row& r, int64_t pos) const {
    const int bs = opt_.block_size;
    return r.blocks[static_cast<size_t>(pos / bs)] * bs + static_cast<int32_t>(pos % bs);
}

int32_t Engine::sliding_slot_of(const Row& r, int64_t pos) const {
    const int bs = opt_.block_size;
    return r.sliding[static_cast<size_t>(pos / bs)] * bs + static_cast<int32_t>(pos % bs);
}

bool Engine::map_sliding(Row& r, int64_t c0, int64_t c1) {
    const int64_t lo = window_start_block(c0), hi = (c1 - 1) / opt_.block_size;
    bool changed = false;
    for (int64_t j = 0; j < static_cast<int64_t>(r.sliding.size()); ++j) {
        if ((j >= lo && j <= hi) || r.sliding[static_cast<size_t>(j)] < 0) continue;
        leave_window(r, j);
        changed = true;
    }
    for (int64_t j = lo; j <= hi; ++j) {
        int32_t& b = r.sliding[static_cast<size_t>(j)];
        if (b >= 0) continue;
        if (r.sliding_spare.empty()) throw std::logic_error("sliding window wider than the row's reserved blocks");
        b = r.sliding_spare.back();
        r.sliding_spare.pop_back();
        changed = true;
    }
    return changed;
}

void Engine::leave_window(Row& r, int64_t j) {
    int32_t& b = r.sliding[static_cast<size_t>(j)];
    const int32_t twin = r.blocks[static_cast<size_t>(j)];
    if (sharing() && (j + 1) * opt_.block_size <= static_cast<int64_t>(r.tokens.size()))
        sliding_cache_->publish_twin(b, twin, cache_->generation(twin));
    // The row keeps its reserve: distinct held blocks never exceed max_seqs reserves, so one is free or evictable.
    sliding_cache_->release({b});
    b = -1;
    r.sliding_spare.push_back(sliding_cache_->allocate(1).front());
}

void Engine::release_sliding(Row& r) {
    for (const int32_t b : r.sliding)
        if (b >= 0) r.sliding_spare.push_back(b);
    r.sliding.clear();
    sliding_cache_->release(r.sliding_spare);
    r.sliding_spare.clear();
}

bool Engine::window_cached(const std::vector<int32_t>& chain, int k) const {
    for (int64_t j = window_start_block(static_cast<int64_t>(k) * opt_.block_size); j < k; ++j) {
        const int32_t g = chain[static_cast<size_t>(j)];
        if (sliding_cache_->find_twin(g, cache_->generation(g)) < 0) return false;
    }
    return true;
}

int Engine::admit(const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated,
                  const sampling::RowParams& params, int64_t reserve, const std::vector<TokenSpan>& decoded,
                  int prompt_logprobs) {
    if (prompt_logprobs < -1 || prompt_logprobs > sampling::kMaxLogprobs)
        throw std::invalid_argument("prompt_logprobs must be in [-1, 20]");
    if (prompt_logprobs >= 0) make_scoring();  // before anything is held: a failed allocation leaves nothing taken
    const int64_t n = static_cast<int64_t>(prompt.size()), k = static_cast<int64_t>(generated.size());
    std::vector<uint8_t> one_row = plan_one_row(n, k, decoded, opt_.prefill_chunk);
    const auto it = std::find_if(rows_.begin(), rows_.end(), [](const Row& r) { return !r.admitted; });
    if (it == rows_.end()) return -1;
    const int need = kv_->blocks_for(std::min(std::max(reserve, n + k + 1), context_));
    // Not even with every shareable block matched: refuse before matching, so a request that waits is not counted
    // as a prefix hit again at every retry.
    const int available = cache_->free_count() + cache_->lru_count();
    const int shareable = sharing() && prompt_logprobs < 0 ? shareable_blocks(one_row, n, max_blocks_) : 0;
    if (need - shareable > available) return -1;
    // Never short while a row is free (distinct held blocks stay within the other rows' reserves); checked anyway.
    if (slides() && sliding_cache_->free_count() + sliding_cache_->lru_count() < sliding_reserve_) return -1;
    if (std::none_of(rows_.begin(), rows_.end(), [](const Row& x) { return x.decoding; })) {
        // Nothing decodes: the step counter restarts (every row's draws count from its own draw_base). Written
        // before any block is taken, so a device error here leaves nothing held.
        global_step_ = 0;
        backend_.upload(state_.step, &global_step_);
    }
    // A prompt's leading cached blocks (computed as this sequence computes them) are shared, as many as leave a
    // canonical start for the rest, which gets fresh blocks. With a sliding pool, as many again as have the window
    // before the first recomputed position cached there too.
    int shared =
        shareable > 0 ? shareable_blocks(one_row, n, cache_->cached(prompt.data(), one_row.data(), shareable)) : 0;
    if (slides() && shared > 0) {
        const std::vector<int32_t> chain = cache_->lookup(prompt.data(), one_row.data(), shared);
        while (shared > 0 && !window_cached(chain, shared)) shared = shareable_blocks(one_row, n, shared - 1);
    }
    std::vector<int32_t> blocks =
        shared > 0 ? cache_->match(prompt.data(), one_row.data(), shared) : std::vector<int32_t>{};
    const int fresh = need - static_cast<int>(blocks.size());
    if (fresh > cache_->free_count() + cache_->lru_count()) {
        cache_->release(blocks);
        return -1;
    }
    const int64_t matched = static_cast<int64_t>(blocks.size());
    blocks.reserve(static_cast<size_t>(need));
    const std::vector<int32_t> more = cache_->allocate(fresh);
    blocks.insert(blocks.end(), more.begin(), more.end());
    Row r;
    try {
        if (slides()) {
            r.sliding.assign(static_cast<size_t>(max_blocks_), -1);
            int twins = 0;
            for (int64_t j = window_start_block(matched * opt_.block_size); j < matched; ++j, ++twins) {
                const int32_t g = blocks[static_cast<size_t>(j)];
                const int32_t b = sliding_cache_->find_twin(g, cache_->generation(g));
                sliding_cache_->share(b);
                r.sliding[static_cast<size_t>(j)] = b;
            }
            r.sliding_spare = sliding_cache_->allocate(sliding_reserve_ - twins);
        }
        r.admitted = true;
        r.n = n;
        r.k = k;
        // Room for every position its blocks hold, so recording the decoded ids never reallocates.
        r.tokens.reserve(static_cast<size_t>(need) * opt_.block_size);
        r.tokens = prompt;
        r.tokens.insert(r.tokens.end(), generated.begin(), generated.end());
        r.one_row = std::move(one_row);
        r.one_row.reserve(r.tokens.capacity());
        // The row's last occupant may have left a logit_bias or mask; set_logit_bias / set_token_mask follow.
        write_adjust_flags(static_cast<int>(it - rows_.begin()), {0, 0});
    } catch (...) {
        cache_->release(blocks);  // the references match() and allocate() took
        if (slides()) release_sliding(r);
        throw;
    }
    r.params = params;
    r.computed = matched * opt_.block_size;
    r.blocks = std::move(blocks);
    if (prompt_logprobs >= 0) {
        r.score_n = prompt_logprobs;
        r.scores.resize(static_cast<size_t>(std::max<int64_t>(n - 1, 0)));
    }
    *it = std::move(r);
    return static_cast<int>(it - rows_.begin());
}

void Engine::prefill_forward(int row, int64_t c0, int64_t c1, const int32_t* ids, bool logits) {
    Row& r = rows_[static_cast<size_t>(row)];
    if (slides()) map_sliding(r, c0, c1);
    const int T = static_cast<int>(c1 - c0);
    std::vector<int32_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(T));
    for (int i = 0; i < T; ++i) {
        pos[static_cast<size_t>(i)] = static_cast<int32_t>(c0 + i);
        slots[static_cast<size_t>(i)] = slot_of(r, c0 + i);
    }
    std::vector<int32_t> table(static_cast<size_t>(max_blocks_), -1);
    std::copy(r.blocks.begin(), r.blocks.end(), table.begin());
    const int32_t qsl[2] = {0, T};
    const int32_t seq_len = static_cast<int32_t>(c1);
    StepInputs in;
    in.token_ids = pf_ids_.slice_rows(0, T);
    in.positions = pf_pos_.slice_rows(0, T);
    in.slot_mapping = pf_slots_.slice_rows(0, T);
    backend_.upload(in.token_ids, ids);
    backend_.upload(in.positions, pos.data());
    backend_.upload(in.slot_mapping, slots.data());
    backend_.upload(pf_qsl_, qsl);
    backend_.upload(pf_seq_len_, &seq_len);
    backend_.upload(pf_table_, table.data());
    in.meta = AttentionMeta{pf_table_, pf_seq_len_, pf_qsl_, 1, opt_.block_size, interleaved_pairs()};
    if (slides()) {
        for (int i = 0; i < T; ++i) slots[static_cast<size_t>(i)] = sliding_slot_of(r, c0 + i);
        in.sliding_slot_mapping = pf_sliding_slots_.slice_rows(0, T);
        in.sliding_block_tables = pf_sliding_table_;
        backend_.upload(in.sliding_slot_mapping, slots.data());
        backend_.upload(pf_sliding_table_, r.sliding.data());
    }
    // Whatever piece of its forward this is (a budget's cut, or the rest after shared blocks), its rows sum as in the
    // whole forward: llama.cpp's batch.
    const bool scores = r.score_n >= 0 && c0 < r.n - 1;
    decoder_->forward(in, T, logits, forward_rows(r.one_row, r.n, c0), scores);
    if (logits) logits_rows_ = 1;
    if (scores) score_prompt(r, c0, c1);
}

int64_t Engine::forward_end(const std::vector<uint8_t>& one_row, int64_t n, int64_t c0) const {
    const uint8_t kind = one_row[static_cast<size_t>(c0)];
    if (kind == kOneRow) return c0 + 1;
    // A forward of several rows ends where its run (at a decoded span or the prompt's end) or its chunk ends.
    const int64_t C = opt_.prefill_chunk, limit = std::min(n, (c0 / C + 1) * C);
    int64_t c1 = c0 + 1;
    while (c1 < limit && one_row[static_cast<size_t>(c1)] == kind) ++c1;
    return c1;
}

int64_t Engine::forward_rows(const std::vector<uint8_t>& one_row, int64_t n, int64_t c) const {
    const uint8_t kind = one_row[static_cast<size_t>(c)];
    if (kind == kOneRow) return 1;
    // The forward starts at its run's start or its chunk's, whichever is later.
    const int64_t chunk = c / opt_.prefill_chunk * opt_.prefill_chunk;
    int64_t c0 = c;
    while (c0 > chunk && one_row[static_cast<size_t>(c0 - 1)] == kind) --c0;
    return forward_end(one_row, n, c0) - c0;
}

int64_t Engine::forward_rest(int row) const {
    const Row& r = rows_.at(static_cast<size_t>(row));
    return r.computed < r.n ? forward_end(r.one_row, r.n, r.computed) - r.computed : 1;
}

int64_t Engine::next_prefill_tokens(int row, int64_t budget) const {
    const int64_t rest = forward_rest(row);
    if (budget >= rest) return rest;
    const int64_t piece = std::min(budget, rest - 2);
    return piece >= 2 && !whole_forwards_ ? piece : 0;
}

int64_t Engine::prefill_left(int row) const {
    const Row& r = rows_.at(static_cast<size_t>(row));
    return std::max(r.n, r.n + r.k - 1) - r.computed;
}

int64_t Engine::min_prefill_budget(int row) const {
    const int64_t rest = forward_rest(row);
    return whole_forwards_ ? rest : std::min<int64_t>(rest, 3);
}

bool Engine::prefill(int row, int32_t* first, int64_t budget) {
    Row& r = rows_.at(static_cast<size_t>(row));
    if (!r.admitted || r.decoding) throw std::logic_error("prefill of a row that is not being admitted");
    const int64_t n = r.n, k = r.k;
    if (r.computed < n) {
        // Forwards end where a run without shared blocks ends them too (plan_one_row), so the KV is the same (a
        // budget may cut a forward into pieces of several rows each, which computes the same bits).
        const int64_t c0 = r.computed, c1 = c0 + next_prefill_tokens(row, budget);
        if (c1 == c0) throw std::logic_error("prefill budget too small for the next piece");
        prefill_forward(row, c0, c1, r.tokens.data() + c0, c1 == n && k == 0);
        r.computed = c1;
        if (c1 == n && sharing()) publish(r, n);
        if (c1 < n || k > 1) return false;
    } else if (r.computed < n + k - 1) {
        // A token generated before a preemption, fed alone as the decode step that first computed it was.
        const int64_t c0 = r.computed;
        prefill_forward(row, c0, c0 + 1, r.tokens.data() + c0, false);
        r.computed = c0 + 1;
        if (r.computed < n + k - 1) return false;
    }
    return complete_prefill(row, first, decoder_->logits(1));
}

bool Engine::complete_prefill(int row, int32_t* first, const Tensor& logits) {
    Row& r = rows_[static_cast<size_t>(row)];
    const int64_t n = r.n, k = r.k;
    // Complete: the row's sampling state, then its first sampled token (or its last generated one) joins decode.
    // Draw numbers count the sequence's own tokens: draw k - 1 made generated[k - 1], the next step draws k.
    const int64_t V = model_.config().vocab_size;
    r.params.draw_base = global_step_ - static_cast<int32_t>(std::max<int64_t>(k - 1, 0));
    std::vector<int32_t> counts(static_cast<size_t>(V), 0);
    for (int64_t i = 0; i < n; ++i) counts[static_cast<size_t>(r.tokens[static_cast<size_t>(i)])] |= sampling::kPromptBit;
    for (int64_t i = n; i < n + k; ++i) counts[static_cast<size_t>(r.tokens[static_cast<size_t>(i)])] += 1;
    backend_.upload(sampling_.params.slice_rows(row, 1), &r.params);
    backend_.upload(sampling_.counts.slice_rows(row, 1), counts.data());
    if (k > 0) {
        join(row, r.tokens.back(), n + k - 1);
        return true;
    }
    backend_.adjust_logits(logits, adjust_rows(row, 1));
    backend_.sample(logits, sampling_rows(row, 1, 0), sampled_.slice_rows(row, 1));
    backend_.download(sampled_.slice_rows(row, 1), first);
    join(row, *first, n);
    return true;
}

int Engine::admit_synthetic(int64_t positions, int32_t input, int64_t reserve, uint64_t seed) {
    if (sharing() || slides())
        throw std::logic_error("admit_synthetic needs prefix caching off and no sliding-window pool");
    const std::vector<int32_t> filler(static_cast<size_t>(std::max<int64_t>(positions, 0)), input);
    check_prompt(filler, 1);
    const int row = admit(filler, {}, sampling::RowParams{}, reserve);
    if (row < 0) return -1;
    Row& r = rows_[static_cast<size_t>(row)];
    r.tokens.clear();  // unknown: nothing is published
    r.one_row.clear();
    const int64_t bs = opt_.block_size;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> values;
    std::vector<uint16_t> halves;
    for (const Tensor& pool : kv_->pools()) {
        for (int64_t b = 0; b * bs < positions; ++b) {
            const int64_t n = std::min(bs, positions - b * bs);
            values.resize(static_cast<size_t>(n * pool.cols));
            for (float& v : values) v = uniform(rng);
            const Tensor dst = pool.slice_rows(int64_t{r.blocks[static_cast<size_t>(b)]} * bs, n);
            if (pool.dtype == DType::F16) {
                halves.resize(values.size());
                std::transform(values.begin(), values.end(), halves.begin(), f32_to_f16);
                backend_.upload(dst, halves.data());
            } else {
                backend_.upload(dst, values.data());
            }
        }
    }
    r.computed = positions;
    r.params.draw_base = global_step_;
    backend_.upload(sampling_.params.slice_rows(row, 1), &r.params);
    const std::vector<int32_t> counts(static_cast<size_t>(model_.config().vocab_size), 0);
    backend_.upload(sampling_.counts.slice_rows(row, 1), counts.data());
    join(row, input, positions);
    return row;
}

void Engine::write_row_state(int row, int32_t input, int64_t pos, int32_t slot, int32_t len) {
    const int32_t p = static_cast<int32_t>(pos);
    backend_.upload(state_.token_ids.slice_rows(row, 1), &input);
    backend_.upload(state_.positions.slice_rows(row, 1), &p);
    backend_.upload(state_.slot_mapping.slice_rows(row, 1), &slot);
    backend_.upload(state_.seq_lens.slice_rows(row, 1), &len);
    ++row_writes_;
    rows_written_ = true;
}

void Engine::join(int row, int32_t input, int64_t pos) {
    Row& r = rows_[static_cast<size_t>(row)];
    inert_pending_[static_cast<size_t>(row)] = 0;  // everything the inert write would write is written here
    std::vector<int32_t> table(static_cast<size_t>(max_blocks_), -1);
    std::copy(r.blocks.begin(), r.blocks.end(), table.begin());
    backend_.upload(block_tables_.slice_rows(row, 1), table.data());
    if (slides()) {
        map_sliding(r, pos, pos + 1);
        backend_.upload(sliding_tables_.slice_rows(row, 1), r.sliding.data());
    }
    write_row_state(row, input, pos, slot_of(r, pos), static_cast<int32_t>(pos + 1));
    if (static_cast<int64_t>(r.tokens.size()) == pos) {  // the first sampled token: decode computes it
        r.tokens.push_back(input);
        r.one_row.push_back(1);
    }
    r.decoding = true;
    r.pos = pos;
    update_bucket();
}

std::vector<int> Engine::grow() {
    std::vector<int> starved;
    for (int row = 0; row < static_cast<int>(rows_.size()); ++row) {
        Row& r = rows_[static_cast<size_t>(row)];
        if (!r.decoding) continue;
        // The step writes position pos (its block is held) and advances the slot to pos + 1.
        const int need = kv_->blocks_for(std::min(r.pos + 2, context_));
        const int have = static_cast<int>(r.blocks.size());
        if (have >= need) continue;
        if (cache_->free_count() + cache_->lru_count() < need - have) {
            starved.push_back(row);
            continue;
        }
        const std::vector<int32_t> more = cache_->allocate(need - have);
        r.blocks.insert(r.blocks.end(), more.begin(), more.end());
        backend_.upload(table_entries(row, have, need - have), more.data());
        ++row_writes_;
        rows_written_ = true;
    }
    return starved;
}

void Engine::release(int row) {
    Row& r = rows_.at(static_cast<size_t>(row));
    if (!r.admitted) return;
    // Host state only: a device write that failed halfway would leave the blocks returned but the row live on the
    // device, or a retry releasing blocks twice. The device row is made inert before the next decode step.
    if (sharing()) publish(r, r.decoding ? r.pos : r.computed);
    cache_->release(r.blocks);
    if (slides()) release_sliding(r);
    // Also a row that never joined: a join that failed partway may have written some of its state.
    inert_pending_[static_cast<size_t>(row)] = 1;
    r = Row{};
    update_bucket();
}

void Engine::write_released_rows() {
    // The common case, every steady step: nothing to write and nothing allocated.
    if (std::none_of(inert_pending_.begin(), inert_pending_.end(), [](uint8_t p) { return p != 0; })) return;
    const std::vector<int32_t> table(static_cast<size_t>(max_blocks_), -1);
    const sampling::RowParams greedy;
    for (int row = 0; row < static_cast<int>(rows_.size()); ++row) {
        if (inert_pending_[static_cast<size_t>(row)] == 0) continue;
        backend_.upload(block_tables_.slice_rows(row, 1), table.data());
        if (slides()) backend_.upload(sliding_tables_.slice_rows(row, 1), table.data());
        backend_.upload(sampling_.params.slice_rows(row, 1), &greedy);
        // A row admitted again since its release holds its new sequence's adjustment (admit() cleared the old one).
        if (!rows_[static_cast<size_t>(row)].admitted) write_adjust_flags(row, {0, 0});
        write_row_state(row, 0, 0, -1, 0);
        inert_pending_[static_cast<size_t>(row)] = 0;  // only once written: a failed write is retried
    }
}

void Engine::write_adjust_flags(int row, std::array<int32_t, 2> flags) {
    auto& cur = adjust_flags_[static_cast<size_t>(row)];
    if (cur == flags) return;
    backend_.upload(adjust_.flags.slice_rows(row, 1), flags.data());
    cur = flags;
}

void Engine::set_logit_bias(int row, const std::vector<std::pair<int32_t, float>>& bias) {
    const Row& r = rows_.at(static_cast<size_t>(row));
    if (!r.admitted) throw std::logic_error("set_logit_bias on a row that is not admitted");
    if (bias.size() > static_cast<size_t>(sampling::kMaxLogitBias))
        throw std::invalid_argument("logit_bias: at most " + std::to_string(sampling::kMaxLogitBias) + " entries");
    const int64_t V = model_.config().vocab_size;
    std::vector<int32_t> ids(sampling::kMaxLogitBias, 0);
    std::vector<float> values(sampling::kMaxLogitBias, 0.0f);
    for (size_t j = 0; j < bias.size(); ++j) {
        if (bias[j].first < 0 || bias[j].first >= V || !std::isfinite(bias[j].second))
            throw std::invalid_argument("logit_bias: token " + std::to_string(bias[j].first) +
                                        " is outside the vocabulary or its bias is not finite");
        ids[j] = bias[j].first;
        values[j] = bias[j].second;
    }
    if (!bias.empty()) {
        backend_.upload(adjust_.bias_ids.slice_rows(row, 1), ids.data());
        backend_.upload(adjust_.bias_values.slice_rows(row, 1), values.data());
    }
    write_adjust_flags(row, {adjust_flags_[static_cast<size_t>(row)][0], static_cast<int32_t>(bias.size())});
    ++row_writes_;
    rows_written_ = true;
}

void Engine::set_token_mask(int row, const uint32_t* words) {
    const Row& r = rows_.at(static_cast<size_t>(row));
    if (!r.admitted) throw std::logic_error("set_token_mask on a row that is not admitted");
    if (words != nullptr) backend_.upload(adjust_.mask.slice_rows(row, 1), words);
    write_adjust_flags(row, {words != nullptr ? 1 : 0, adjust_flags_[static_cast<size_t>(row)][1]});
    ++row_writes_;
    rows_written_ = true;
}

std::vector<int> Engine::decoding_rows() const {
    std::vector<int> out;
    for (int row = 0; row < num_seqs_; ++row) {
        if (rows_[static_cast<size_t>(row)].decoding) out.push_back(row);
    }
    return out;
}

int Engine::bucket_once_joined() const {
    int rows = 0;
    for (int row = 0; row < static_cast<int>(rows_.size()); ++row) {
        if (rows_[static_cast<size_t>(row)].admitted) rows = row + 1;
    }
    return rows > 0 ? batch_bucket(rows) : 0;
}

int Engine::shareable_blocks(const std::vector<uint8_t>& one_row, int64_t n, int at_most) const {
    const int bs = opt_.block_size;
    int k = static_cast<int>(std::min<int64_t>(at_most, (n - 1) / bs));
    for (; k > 0; --k) {
        const int64_t p = static_cast<int64_t>(k) * bs;
        const uint8_t here = one_row[static_cast<size_t>(p)], before = one_row[static_cast<size_t>(p - 1)];
        if (here != kOneRow && forward_end(one_row, n, p) - p < 2) continue;
        // A forward ended at p in both sequences: at a chunk boundary or after a forward of one row; or where the run
        // changes kind, when block k is cached too (so the other sequence's kinds there are these).
        if (!whole_forwards_ || p % opt_.prefill_chunk == 0 || before == kOneRow || (here != before && k < at_most))
            break;
    }
    return k;
}

void Engine::publish(const Row& r, int64_t written) {
    // Only blocks the row holds, every position written, every token known.
    const int64_t known = std::min({written, static_cast<int64_t>(r.tokens.size()),
                                    static_cast<int64_t>(r.blocks.size()) * opt_.block_size});
    const int full = static_cast<int>(known / opt_.block_size);
    cache_->publish(r.blocks, r.tokens.data(), r.one_row.data(), full);
    for (int j = 0; j < std::min(full, static_cast<int>(r.sliding.size())); ++j) {
        const int32_t b = r.sliding[static_cast<size_t>(j)], twin = r.blocks[static_cast<size_t>(j)];
        if (b >= 0) sliding_cache_->publish_twin(b, twin, cache_->generation(twin));
    }
}

}  // namespace tracelm
