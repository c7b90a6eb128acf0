#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace tracelm {

Tensor Engine::i32(const std::string& name, int64_t n, int64_t cols) {
    Buffer* b = backend_.alloc(static_cast<size_t>(n * cols) * sizeof(int32_t), name);
    buffers_.push_back(b);
    return whole(b, DType::I32, n, cols);
}

int Engine::batch_bucket(int S) {
    for (const int b : {1, 2, 4, 8, 16, 32}) {
        if (S <= b) return b;
    }
    return (S + 31) / 32 * 32;
}

DType kv_dtype_for(const Model& model, const EngineOptions& options) {
    return options.kv_dtype.value_or(model.gguf() != nullptr ? DType::F16 : DType::F32);
}

namespace {
// What decides a block's KV besides its tokens (the cache lives in one engine, with one model, so this only guards
// against a cache that outlives or is shared across engines): the model's shapes and weights, RoPE, KV dtype and
// block size.
uint64_t prefix_seed(const Model& model, DType kv_dtype, int block_size) {
    const ModelConfig& c = model.config();
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the values' bytes
    auto add = [&](const auto& v) {
        const auto* p = reinterpret_cast<const unsigned char*>(&v);
        for (size_t i = 0; i < sizeof(v); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    };
    for (const char ch : c.architecture) add(ch);
    for (const int v : {static_cast<int>(c.arch), c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                        c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.vocab_size,
                        static_cast<int>(kv_dtype), block_size, static_cast<int>(model.weight_dtype())}) {
        add(v);
    }
    add(c.rms_norm_eps);
    add(c.rope_theta);
    for (const float f : c.rope_factors()) add(f);
    add(model.parameters());
    add(&model);  // the weights themselves: two loads of one file are different models to the cache
    return h;
}

// How a sequence of an n-token prompt (with its `decoded` spans) and k generated tokens is computed, per position:
// 1 for a forward of one row, 0 for one of several. The prompt's runs outside the decoded spans are prefilled in
// chunks cut at the run's start and end and at the multiples of C (so a prompt without decoded spans is cut where
// llama.cpp cuts it); decoded spans and generated tokens take one forward each. Throws std::invalid_argument on
// spans that are not ascending, disjoint, non-empty and before the prompt's last token.
std::vector<uint8_t> plan_one_row(int64_t n, int64_t k, const std::vector<TokenSpan>& decoded, int64_t C) {
    std::vector<uint8_t> one_row(static_cast<size_t>(n + k), 1);
    const auto prefill_run = [&](int64_t b, int64_t e) {
        for (int64_t c0 = b; c0 < e;) {
            const int64_t c1 = std::min(e, (c0 / C + 1) * C);
            if (c1 - c0 >= 2) std::fill(one_row.begin() + c0, one_row.begin() + c1, 0);
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

Engine::Engine(const Model& model, Backend& backend, EngineOptions options)
    : model_(model),
      backend_(backend),
      opt_(options),
      max_rows_(batch_bucket(options.max_seqs)),
      rows_(static_cast<size_t>(std::max(options.max_seqs, 0))),
      inert_pending_(rows_.size(), 0) {
    const ModelConfig& c = model.config();
    if (opt_.block_size <= 0 || opt_.max_seqs <= 0 || opt_.prefill_chunk <= 0 || opt_.context <= 0 ||
        opt_.kv_blocks < 0) {
        throw std::invalid_argument("engine: block size, sequences, prefill chunk and context must be positive");
    }
    context_ = std::min<int64_t>(opt_.context, c.max_position_embeddings);
    max_blocks_ = static_cast<int>((context_ + opt_.block_size - 1) / opt_.block_size);
    const int64_t pool = opt_.kv_blocks > 0 ? opt_.kv_blocks : static_cast<int64_t>(max_blocks_) * opt_.max_seqs;
    if (pool < max_blocks_) {
        // Then one sequence alone always fits, so a scheduler can always make progress by preempting the others.
        throw std::invalid_argument("engine: a KV pool of " + std::to_string(pool) + " blocks cannot hold one " +
                                    std::to_string(context_) + "-token context (" + std::to_string(max_blocks_) +
                                    " blocks of " + std::to_string(opt_.block_size) + ")");
    }
    if (pool > std::numeric_limits<int32_t>::max() / opt_.block_size) {
        throw std::invalid_argument("engine: KV pool of " + std::to_string(pool) + " blocks is too large");
    }
    const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
    kv_ = std::make_unique<PagedKvCache>(backend, c.num_hidden_layers, kv_dim, static_cast<int>(pool),
                                         opt_.block_size, kv_dtype_for(model, opt_));
    cache_ = std::make_unique<PrefixCache>(static_cast<int>(pool), opt_.block_size,
                                           prefix_seed(model, kv_->dtype(), opt_.block_size));
    decoder_ = std::make_unique<Decoder>(model, backend, *kv_, std::max(opt_.prefill_chunk, max_rows_), max_rows_);

    pf_ids_ = i32("prefill.token_ids", opt_.prefill_chunk);
    pf_pos_ = i32("prefill.positions", opt_.prefill_chunk);
    pf_slots_ = i32("prefill.slot_mapping", opt_.prefill_chunk);
    pf_qsl_ = i32("prefill.query_start_loc", 2);
    pf_seq_len_ = i32("prefill.seq_lens", 1);
    pf_table_ = i32("prefill.block_table", 1, max_blocks_);

    const int S = max_rows_;
    block_tables_ = i32("block_tables", S, max_blocks_);
    state_.token_ids = i32("decode.token_ids", S);
    state_.positions = i32("decode.positions", S);
    state_.slot_mapping = i32("decode.slot_mapping", S);
    state_.seq_lens = i32("decode.seq_lens", S);
    state_.step = i32("decode.step", 1);
    state_.history = i32("decode.history", context_ * S);
    history_buf_ = state_.history.buf;
    state_.block_size = opt_.block_size;
    decode_qsl_ = i32("decode.query_start_loc", S + 1);
    sampled_ = i32("sampled", S);
    const int64_t V = c.vocab_size;
    sampling_.params = i32("sampling.params", S, sampling::kParamWords);
    sampling_.counts = i32("sampling.counts", S, V);
    sampling_.step = state_.step;
    sampling_.top_ids = i32("sampling.top_ids", S, sampling::kMaxLogprobs);
    buffers_.push_back(backend_.alloc(static_cast<size_t>(S) * (1 + sampling::kMaxLogprobs) * sizeof(float),
                                      "sampling.logprobs"));
    sampling_.logprobs = whole(buffers_.back(), DType::F32, S, 1 + sampling::kMaxLogprobs);
    sampling_.ws = sampling::make_workspace(backend_, S, V);
    buffers_.push_back(sampling_.ws.buffer);
    std::vector<int32_t> qsl(static_cast<size_t>(S) + 1);
    std::iota(qsl.begin(), qsl.end(), 0);
    backend_.upload(decode_qsl_, qsl.data());
    make_rows_inert();
}

void Engine::make_rows_inert() {
    // No blocks, slot -1, length 0, greedy; the step counter at 0.
    const size_t S = static_cast<size_t>(max_rows_);
    const std::vector<int32_t> no_blocks(S * static_cast<size_t>(max_blocks_), -1), minus(S, -1), zeros(S, 0);
    const std::vector<sampling::RowParams> greedy(S);
    backend_.upload(block_tables_, no_blocks.data());
    backend_.upload(state_.token_ids, zeros.data());
    backend_.upload(state_.positions, zeros.data());
    backend_.upload(state_.slot_mapping, minus.data());
    backend_.upload(state_.seq_lens, zeros.data());
    backend_.upload(state_.step, zeros.data());
    backend_.upload(sampling_.params, greedy.data());
    global_step_ = 0;
    std::fill(inert_pending_.begin(), inert_pending_.end(), 0);
}

Engine::~Engine() {
    for (const auto& [bucket, g] : graphs_) {
        if (g.graph >= 0) backend_.destroy_graph(g.graph);
    }
    for (Buffer* b : buffers_) backend_.free(b);
}

bool Engine::captured() const {
    const auto it = graphs_.find(last_bucket_);
    return it != graphs_.end() && it->second.graph >= 0;
}

size_t Engine::graph_ops() const { return captured() ? backend_.graph_nodes(graphs_.at(last_bucket_).graph) : 0; }

SamplingIo Engine::sampling_rows(int64_t r0, int64_t n, int step_offset) const {
    SamplingIo io = sampling_;
    io.params = sampling_.params.slice_rows(r0, n);
    io.counts = sampling_.counts.slice_rows(r0, n);
    io.logprobs = sampling_.logprobs.slice_rows(r0, n);
    io.top_ids = sampling_.top_ids.slice_rows(r0, n);
    io.step_offset = step_offset;
    return io;
}

Tensor Engine::table_entries(int row, int64_t first, int64_t n) const {
    const Tensor flat = whole(block_tables_.buf, DType::I32, block_tables_.numel(), 1);
    return flat.slice_rows(static_cast<int64_t>(row) * max_blocks_ + first, n);
}

int32_t Engine::slot_of(const Row& r, int64_t pos) const {
    const int bs = opt_.block_size;
    return r.blocks[static_cast<size_t>(pos / bs)] * bs + static_cast<int32_t>(pos % bs);
}

void Engine::check_prompt(const std::vector<int32_t>& prompt, int64_t new_tokens) const {
    const int64_t vocab = model_.config().vocab_size;
    if (prompt.empty()) throw std::runtime_error("empty prompt");
    for (const int32_t id : prompt) {
        if (id < 0 || id >= vocab) {
            throw std::runtime_error("invalid token id " + std::to_string(id) + " (vocabulary size " +
                                     std::to_string(vocab) + ")");
        }
    }
    if (static_cast<int64_t>(prompt.size()) + new_tokens > context_) {
        throw std::runtime_error("prompt of " + std::to_string(prompt.size()) + " tokens plus " +
                                 std::to_string(new_tokens) + " new tokens exceeds the context of " +
                                 std::to_string(context_) + " tokens");
    }
}

std::vector<int32_t> Engine::start(const std::vector<std::vector<int32_t>>& prompts, int max_new_tokens,
                                   const std::vector<sampling::RowParams>& params,
                                   const std::vector<std::vector<TokenSpan>>& decoded) {
    const int S = static_cast<int>(prompts.size());
    if (S == 0) throw std::runtime_error("no prompts given");
    if (S > opt_.max_seqs) {
        throw std::runtime_error(std::to_string(S) + " sequences requested, the engine was built for " +
                                 std::to_string(opt_.max_seqs));
    }
    if (max_new_tokens < 1) throw std::runtime_error("max new tokens must be at least 1");
    if (!params.empty() && params.size() != prompts.size())
        throw std::runtime_error("sampling parameters must be given for every sequence or none");
    if (!decoded.empty() && decoded.size() != prompts.size())
        throw std::runtime_error("decoded spans must be given for every sequence or none");
    for (const sampling::RowParams& p : params) sampling::check_params(p);
    for (const auto& p : prompts) check_prompt(p, max_new_tokens);
    finish();

    // Every block the request can touch is reserved up front, so decode never allocates. Rows are taken lowest
    // first, so sequence s decodes in row s.
    for (int s = 0; s < S; ++s) {
        const auto& p = prompts[static_cast<size_t>(s)];
        const int row = admit(p, {}, params.empty() ? sampling::RowParams{} : params[static_cast<size_t>(s)],
                              static_cast<int64_t>(p.size()) + max_new_tokens,
                              decoded.empty() ? std::vector<TokenSpan>{} : decoded[static_cast<size_t>(s)]);
        if (row < 0) {
            finish();
            throw std::runtime_error("KV cache full: " + std::to_string(kv_blocks_total()) +
                                     " blocks cannot hold " + std::to_string(S) + " sequences of " +
                                     std::to_string(max_new_tokens) + " new tokens");
        }
    }
    std::vector<int32_t> first(static_cast<size_t>(S));
    try {
        for (int s = 0; s < S; ++s) {
            while (!prefill(s, &first[static_cast<size_t>(s)])) {
            }
        }
    } catch (...) {
        finish();
        throw;
    }
    steps_ = 0;
    return first;
}

int Engine::free_rows() const {
    return static_cast<int>(std::count_if(rows_.begin(), rows_.end(), [](const Row& r) { return !r.admitted; }));
}

int Engine::admit(const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated,
                  const sampling::RowParams& params, int64_t reserve, const std::vector<TokenSpan>& decoded) {
    const int64_t n = static_cast<int64_t>(prompt.size()), k = static_cast<int64_t>(generated.size());
    std::vector<uint8_t> one_row = plan_one_row(n, k, decoded, opt_.prefill_chunk);
    const auto it = std::find_if(rows_.begin(), rows_.end(), [](const Row& r) { return !r.admitted; });
    if (it == rows_.end()) return -1;
    const int need = kv_->blocks_for(std::min(std::max(reserve, n + k + 1), context_));
    // Not even with every shareable block matched: refuse before matching, so a request that waits is not counted
    // as a prefix hit again at every retry.
    const int available = cache_->free_count() + cache_->lru_count();
    const int shareable = opt_.prefix_cache ? shareable_blocks(one_row, n, max_blocks_) : 0;
    if (need - shareable > available) return -1;
    if (std::none_of(rows_.begin(), rows_.end(), [](const Row& x) { return x.decoding; })) {
        // Nothing decodes: the step counter restarts (every row's draws count from its own draw_base). Written
        // before any block is taken, so a device error here leaves nothing held.
        global_step_ = 0;
        backend_.upload(state_.step, &global_step_);
    }
    // A prompt's leading cached blocks (computed as this sequence computes them) are shared, as many as leave a
    // canonical start for the rest, which gets fresh blocks.
    const int shared =
        shareable > 0 ? shareable_blocks(one_row, n, cache_->cached(prompt.data(), one_row.data(), shareable)) : 0;
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
        r.admitted = true;
        r.n = n;
        r.k = k;
        // Room for every position its blocks hold, so recording the decoded ids never reallocates.
        r.tokens.reserve(static_cast<size_t>(need) * opt_.block_size);
        r.tokens = prompt;
        r.tokens.insert(r.tokens.end(), generated.begin(), generated.end());
        r.one_row = std::move(one_row);
        r.one_row.reserve(r.tokens.capacity());
    } catch (...) {
        cache_->release(blocks);  // the references match() and allocate() took
        throw;
    }
    r.params = params;
    r.computed = matched * opt_.block_size;
    r.blocks = std::move(blocks);
    *it = std::move(r);
    return static_cast<int>(it - rows_.begin());
}

void Engine::prefill_forward(int row, int64_t c0, int64_t c1, const int32_t* ids, bool logits) {
    const Row& r = rows_[static_cast<size_t>(row)];
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
    decoder_->forward(in, T, logits);
}

int64_t Engine::forward_end(const std::vector<uint8_t>& one_row, int64_t n, int64_t c0) const {
    if (one_row[static_cast<size_t>(c0)] != 0) return c0 + 1;
    // A forward of several rows ends where its run (at a decoded span or the prompt's end) or its chunk ends.
    const int64_t C = opt_.prefill_chunk, limit = std::min(n, (c0 / C + 1) * C);
    int64_t c1 = c0 + 1;
    while (c1 < limit && one_row[static_cast<size_t>(c1)] == 0) ++c1;
    return c1;
}

int64_t Engine::next_prefill_tokens(int row, int64_t budget) const {
    const Row& r = rows_.at(static_cast<size_t>(row));
    const int64_t rest = r.computed < r.n ? forward_end(r.one_row, r.n, r.computed) - r.computed : 1;
    if (budget >= rest) return rest;
    const int64_t piece = std::min(budget, rest - 2);
    return piece >= 2 ? piece : 0;
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
        if (c1 == n && opt_.prefix_cache) publish(r, n);
        if (c1 < n || k > 1) return false;
    } else if (r.computed < n + k - 1) {
        // A token generated before a preemption, fed alone as the decode step that first computed it was.
        const int64_t c0 = r.computed;
        prefill_forward(row, c0, c0 + 1, r.tokens.data() + c0, false);
        r.computed = c0 + 1;
        if (r.computed < n + k - 1) return false;
    }
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
    backend_.sample(decoder_->logits(1), sampling_rows(row, 1, 0), sampled_.slice_rows(row, 1));
    backend_.download(sampled_.slice_rows(row, 1), first);
    join(row, *first, n);
    return true;
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
    if (opt_.prefix_cache) publish(r, r.decoding ? r.pos : r.computed);
    cache_->release(r.blocks);
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
        backend_.upload(sampling_.params.slice_rows(row, 1), &greedy);
        write_row_state(row, 0, 0, -1, 0);
        inert_pending_[static_cast<size_t>(row)] = 0;  // only once written: a failed write is retried
    }
}

std::vector<int> Engine::buckets() const {
    std::vector<int> out;
    for (int b = 1; b <= max_rows_; b = batch_bucket(b + 1)) out.push_back(b);
    return out;
}

int Engine::bucket_once_joined() const {
    int rows = 0;
    for (int row = 0; row < static_cast<int>(rows_.size()); ++row) {
        if (rows_[static_cast<size_t>(row)].admitted) rows = row + 1;
    }
    return rows > 0 ? batch_bucket(rows) : 0;
}

void Engine::update_bucket() {
    num_seqs_ = 0;
    for (int row = 0; row < static_cast<int>(rows_.size()); ++row) {
        if (rows_[static_cast<size_t>(row)].decoding) num_seqs_ = row + 1;
    }
    bucket_ = num_seqs_ > 0 ? batch_bucket(num_seqs_) : 0;
}

void Engine::issue_decode_step() {
    const int S = bucket_;
    DecodeState st = state_;
    st.token_ids = state_.token_ids.slice_rows(0, S);
    st.positions = state_.positions.slice_rows(0, S);
    st.slot_mapping = state_.slot_mapping.slice_rows(0, S);
    st.seq_lens = state_.seq_lens.slice_rows(0, S);
    st.block_tables = block_tables_.slice_rows(0, S);
    st.history = history_view(S);
    StepInputs in;
    in.token_ids = st.token_ids;
    in.positions = st.positions;
    in.slot_mapping = st.slot_mapping;
    in.meta = AttentionMeta{st.block_tables, st.seq_lens, decode_qsl_.slice_rows(0, S + 1), S, opt_.block_size,
                            interleaved_pairs()};
    decoder_->forward(in, S);
    const Tensor sampled = sampled_.slice_rows(0, S);
    backend_.sample(decoder_->logits(S), sampling_rows(0, S, 1), sampled);
    backend_.advance_decode(sampled, st);
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
    if (cache_->free_count() != cache_->num_blocks()) throw std::logic_error("touch_kv() with KV blocks in use or cached");
    const ModelConfig& c = model_.config();
    std::vector<unsigned char> zeros;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
        for (const Tensor* t : {&kv_->k(l), &kv_->v(l)}) {
            const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>((size_t{1} << 20) / t->row_bytes()));
            zeros.resize(static_cast<size_t>(rows) * t->row_bytes());
            for (int64_t r = 0; r < t->rows; r += rows) {
                const Tensor part = t->slice_rows(r, std::min(rows, t->rows - r));
                backend_.upload(part, zeros.data());
            }
        }
    }
}

int Engine::captured_buckets() const {
    return static_cast<int>(
        std::count_if(graphs_.begin(), graphs_.end(), [](const auto& bg) { return bg.second.graph >= 0; }));
}

double Engine::replay_seconds(int bucket) const {
    const auto it = graphs_.find(bucket);
    return it == graphs_.end() ? 0.0 : it->second.replay_seconds;
}

void Engine::step() {
    if (num_seqs_ == 0) throw std::logic_error("step() with no decoding sequence");
    write_released_rows();
    BucketGraph& g = graphs_[bucket_];
    if (!uses_graphs() || !g.warmed) {
        // Eager decode, which also serves as the warm-up that exercises the exact ops to capture (and lets
        // a backend size its scratch before capture).
        issue_decode_step();
        g.warmed = true;
    } else {
        if (g.graph < 0) capture(g);
        // Capturing records without executing; the replay produces this step's result.
        backend_.replay(g.graph);
        ++replays_;
    }
    ++steps_;
    ++global_step_;
    last_bucket_ = bucket_;
    for (Row& r : rows_) r.pos += r.decoding ? 1 : 0;
    if (!rows_written_) ++steady_steps_;
    rows_written_ = false;
}

std::vector<int32_t> Engine::sampled() {
    std::vector<int32_t> out(static_cast<size_t>(num_seqs_));
    backend_.download(sampled_.slice_rows(0, num_seqs_), out.data());
    for (int s = 0; s < num_seqs_; ++s) {
        // The id the last step sampled is the input at r.pos; a row whose ids were not read at every step stays
        // behind for good (its later blocks are not published).
        Row& r = rows_[static_cast<size_t>(s)];
        if (r.decoding && static_cast<int64_t>(r.tokens.size()) == r.pos) {
            r.tokens.push_back(out[static_cast<size_t>(s)]);
            r.one_row.push_back(1);
        }
    }
    return out;
}

Tensor Engine::history_view(int rows) const { return whole(history_buf_, DType::I32, context_, rows); }

std::vector<int32_t> Engine::history(int n) {
    const int S = num_seqs_, B = bucket_;
    const Tensor h = history_view(B);
    if (n < 0 || n > h.rows) throw std::out_of_range("history beyond capacity");
    std::vector<int32_t> padded(static_cast<size_t>(n) * B);
    if (n > 0) backend_.download(h.slice_rows(0, n), padded.data());
    std::vector<int32_t> out(static_cast<size_t>(n) * S);
    for (int r = 0; r < n; ++r) {
        std::copy_n(padded.begin() + static_cast<int64_t>(r) * B, S, out.begin() + static_cast<int64_t>(r) * S);
    }
    return out;
}

std::vector<sampling::TokenLogprobs> Engine::logprobs() {
    const int S = num_seqs_;
    std::vector<float> lp(static_cast<size_t>(S) * (1 + sampling::kMaxLogprobs));
    std::vector<int32_t> top(static_cast<size_t>(S) * sampling::kMaxLogprobs);
    const std::vector<int32_t> ids = sampled();
    backend_.download(sampling_.logprobs.slice_rows(0, S), lp.data());
    backend_.download(sampling_.top_ids.slice_rows(0, S), top.data());
    std::vector<sampling::TokenLogprobs> out(static_cast<size_t>(S));
    for (int s = 0; s < S; ++s) {
        const int n = rows_[static_cast<size_t>(s)].params.logprobs;
        if (n < 0) continue;
        sampling::TokenLogprobs& t = out[static_cast<size_t>(s)];
        const float* row = lp.data() + static_cast<size_t>(s) * (1 + sampling::kMaxLogprobs);
        t.id = ids[static_cast<size_t>(s)];
        t.logprob = row[0];
        for (int i = 0; i < n; ++i) {
            const int32_t id = top[static_cast<size_t>(s) * sampling::kMaxLogprobs + static_cast<size_t>(i)];
            if (id >= 0) t.top.emplace_back(id, row[1 + i]);
        }
    }
    return out;
}

std::vector<float> Engine::logits() {
    const Tensor l = decoder_->logits(num_seqs_);
    std::vector<float> out(static_cast<size_t>(l.numel()));
    backend_.download(l, out.data());
    return out;
}

int Engine::shareable_blocks(const std::vector<uint8_t>& one_row, int64_t n, int at_most) const {
    const int bs = opt_.block_size;
    int k = static_cast<int>(std::min<int64_t>(at_most, (n - 1) / bs));
    for (; k > 0; --k) {
        const int64_t p = static_cast<int64_t>(k) * bs;
        if (one_row[static_cast<size_t>(p)] != 0 || forward_end(one_row, n, p) - p >= 2) break;
    }
    return k;
}

void Engine::publish(const Row& r, int64_t written) {
    // Only blocks the row holds, every position written, every token known.
    const int64_t known = std::min({written, static_cast<int64_t>(r.tokens.size()),
                                    static_cast<int64_t>(r.blocks.size()) * opt_.block_size});
    cache_->publish(r.blocks, r.tokens.data(), r.one_row.data(), static_cast<int>(known / opt_.block_size));
}

void Engine::finish() {
    for (int row = 0; row < static_cast<int>(rows_.size()); ++row) release(row);
}

}  // namespace tracelm
