#include "engine/engine.h"

#include <algorithm>
#include <array>
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
    // DeepSeek keeps F32 from a GGUF too: the indexer's key pool must be F32 (dsa_indexer_paged), and tracelm does
    // not reproduce llama.cpp's DeepSeek numbers, which is what an F16 cache is for.
    const bool llama_cpp_numbers = model.gguf() != nullptr && !model.config().mla;
    return options.kv_dtype.value_or(llama_cpp_numbers ? DType::F16 : DType::F32);
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
    add(c.rope_local_theta);
    add(c.sliding_window);
    for (const uint8_t s : c.layer_sliding) add(s);
    add(model.parameters());
    add(&model);  // the weights themselves: two loads of one file are different models to the cache
    return h;
}

}  // namespace

namespace {

// The KV pools an engine makes: blocks of the full-context pool and of the sliding-window one (0: none), and what
// decides them.
struct KvPools {
    int64_t context = 0;
    int max_blocks = 0;  // blocks of one full context
    int pool = 0, sliding_pool = 0;
    int window = 0, sliding_reserve = 0;
};

// The KV pools an engine of these options makes for this model (its constructor's checks included).
KvPools plan_kv_pools(const ModelConfig& c, const EngineOptions& o) {
    if (o.block_size <= 0 || o.max_seqs <= 0 || o.prefill_chunk <= 0 || o.context <= 0 ||
        o.kv_blocks < 0 || o.kv_sliding_blocks < 0) {
        throw std::invalid_argument("engine: block size, sequences, prefill chunk and context must be positive");
    }
    KvPools k;
    k.context = std::min<int64_t>(o.context, c.max_position_embeddings);
    k.max_blocks = static_cast<int>((k.context + o.block_size - 1) / o.block_size);
    const int64_t pool = o.kv_blocks > 0 ? o.kv_blocks : static_cast<int64_t>(k.max_blocks) * o.max_seqs;
    if (pool < k.max_blocks) {
        // Then one sequence alone always fits, so a scheduler can always make progress by preempting the others.
        throw std::invalid_argument("engine: a KV pool of " + std::to_string(pool) + " blocks cannot hold one " +
                                    std::to_string(k.context) + "-token context (" + std::to_string(k.max_blocks) +
                                    " blocks of " + std::to_string(o.block_size) + ")");
    }
    if (pool > std::numeric_limits<int32_t>::max() / o.block_size) {
        throw std::invalid_argument("engine: KV pool of " + std::to_string(pool) + " blocks is too large");
    }
    // Sliding-window layers get a pool of their own when a row's window and one prefill forward take fewer blocks
    // than its context: every admitted row holds that many there (a query at c0 sees back to c0 - window + 1).
    int64_t sliding_pool = 0;
    if (c.sliding_window > 0) {
        const int64_t bs = o.block_size, span = c.sliding_window - 1 + o.prefill_chunk;
        const int64_t reserve = (span + bs - 1) / bs + 1;
        if (reserve < k.max_blocks) {
            k.window = c.sliding_window;
            k.sliding_reserve = static_cast<int>(reserve);
            const int64_t least = reserve * o.max_seqs;
            // Cached windows of earlier prompts: a query's window spans at most this many blocks.
            const int64_t window_blocks = (c.sliding_window - 1 + bs - 1) / bs + 1;
            const int64_t room = o.prefix_cache ? 4 * window_blocks * o.max_seqs : 0;
            sliding_pool = o.kv_sliding_blocks > 0 ? o.kv_sliding_blocks : least + room;
            if (sliding_pool < least || sliding_pool > std::numeric_limits<int32_t>::max() / o.block_size) {
                throw std::invalid_argument("engine: a sliding-window KV pool of " + std::to_string(sliding_pool) +
                                            " blocks cannot hold the windows of " + std::to_string(o.max_seqs) +
                                            " sequences (" + std::to_string(reserve) + " blocks each) or is too large");
            }
        }
    }
    k.pool = static_cast<int>(pool);
    k.sliding_pool = static_cast<int>(sliding_pool);
    return k;
}

// The values a token keeps per layer: K and V of every KV head, or DeepSeek's latent row (latent and rope key)
// and, for V3.2, its indexer key.
KvLayout kv_layout(const ModelConfig& c) {
    if (c.mla) return {c.mla->latent_width(), 0, c.mla->index_n_heads > 0 ? c.mla->index_head_dim : 0};
    const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
    return {kv_dim, kv_dim, 0};
}

}  // namespace

size_t Engine::kv_bytes_for(const Model& model, const EngineOptions& options) {
    const ModelConfig& c = model.config();
    const KvPools k = plan_kv_pools(c, options);
    return PagedKvCache::bytes_for(c.num_hidden_layers, kv_layout(c), k.pool, options.block_size,
                                   kv_dtype_for(model, options), c.layer_sliding, k.sliding_pool);
}

Engine::Engine(const Model& model, Backend& backend, EngineOptions options)
    : model_(model),
      backend_(backend),
      opt_(options),
      max_rows_(batch_bucket(options.max_seqs)),
      rows_(static_cast<size_t>(std::max(options.max_seqs, 0))),
      inert_pending_(rows_.size(), 0) {
    const ModelConfig& c = model.config();
    const KvPools k = plan_kv_pools(c, opt_);
    context_ = k.context;
    max_blocks_ = k.max_blocks;
    window_ = k.window;
    sliding_reserve_ = k.sliding_reserve;
    const int pool = k.pool, sliding_pool = k.sliding_pool;
    for (const LayerWeights& l : model.weights().layers)
        whole_forwards_ = whole_forwards_ || (l.experts && ggml_has_tiled_order(l.experts->gate.dtype));
    for (const auto& [dt, count] : model.dtype_counts()) tiled_weights_ = tiled_weights_ || ggml_has_tiled_order(dt);
    kv_ = std::make_unique<PagedKvCache>(backend, c.num_hidden_layers, kv_layout(c), static_cast<int>(pool),
                                         opt_.block_size, kv_dtype_for(model, opt_), c.layer_sliding,
                                         static_cast<int>(sliding_pool));
    cache_ = std::make_unique<PrefixCache>(static_cast<int>(pool), opt_.block_size,
                                           prefix_seed(model, kv_->dtype(), opt_.block_size));
    if (sliding_pool > 0) {
        sliding_cache_ = std::make_unique<PrefixCache>(static_cast<int>(sliding_pool), opt_.block_size, 0);
    }
    // Rows for a prompt chunk beside a whole decode bucket (a mixed step), and one more sequence than the bucket's.
    decoder_ = std::make_unique<Decoder>(model, backend, *kv_, opt_.prefill_chunk + max_rows_, max_rows_ + 1,
                                         static_cast<int64_t>(max_blocks_) * opt_.block_size, opt_.dense_attention);

    pf_ids_ = i32("prefill.token_ids", opt_.prefill_chunk);
    pf_pos_ = i32("prefill.positions", opt_.prefill_chunk);
    pf_slots_ = i32("prefill.slot_mapping", opt_.prefill_chunk);
    pf_qsl_ = i32("prefill.query_start_loc", 2);
    pf_seq_len_ = i32("prefill.seq_lens", 1);
    pf_table_ = i32("prefill.block_table", 1, max_blocks_);
    if (slides()) {
        pf_sliding_slots_ = i32("prefill.sliding_slot_mapping", opt_.prefill_chunk);
        pf_sliding_table_ = i32("prefill.sliding_block_table", 1, max_blocks_);
    }

    const int S = max_rows_;
    mx_ids_ = i32("mixed.token_ids", S + opt_.prefill_chunk);
    mx_pos_ = i32("mixed.positions", S + opt_.prefill_chunk);
    mx_slots_ = i32("mixed.slot_mapping", S + opt_.prefill_chunk);
    mx_qsl_ = i32("mixed.query_start_loc", S + 2);
    mx_seq_lens_ = i32("mixed.seq_lens", S + 1);
    mx_tables_ = i32("mixed.block_tables", S + 1, max_blocks_);
    block_tables_ = i32("block_tables", S, max_blocks_);
    if (slides()) {
        sliding_tables_ = i32("sliding_block_tables", S, max_blocks_);
        sliding_slots_ = i32("decode.sliding_slot_mapping", S);
        mx_sliding_slots_ = i32("mixed.sliding_slot_mapping", S + opt_.prefill_chunk);
        mx_sliding_tables_ = i32("mixed.sliding_block_tables", S + 1, max_blocks_);
    }
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
    adjust_.flags = i32("adjust.flags", S, 2);
    adjust_.mask = i32("adjust.mask", S, sampling::mask_words(V));
    adjust_.bias_ids = i32("adjust.bias_ids", S, sampling::kMaxLogitBias);
    buffers_.push_back(backend_.alloc(static_cast<size_t>(S) * sampling::kMaxLogitBias * sizeof(float),
                                      "adjust.bias_values"));
    adjust_.bias_values = whole(buffers_.back(), DType::F32, S, sampling::kMaxLogitBias);
    adjust_flags_.assign(static_cast<size_t>(S), {0, 0});
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
    if (slides()) backend_.upload(sliding_tables_, no_blocks.data());
    backend_.upload(state_.token_ids, zeros.data());
    backend_.upload(state_.positions, zeros.data());
    backend_.upload(state_.slot_mapping, minus.data());
    backend_.upload(state_.seq_lens, zeros.data());
    backend_.upload(state_.step, zeros.data());
    backend_.upload(sampling_.params, greedy.data());
    std::fill(adjust_flags_.begin(), adjust_flags_.end(), std::array<int32_t, 2>{0, 0});
    backend_.upload(adjust_.flags, adjust_flags_.data());
    global_step_ = 0;
    std::fill(inert_pending_.begin(), inert_pending_.end(), 0);
}

Engine::~Engine() {
    for (const auto& [bucket, g] : graphs_) {
        if (g.graph >= 0) backend_.destroy_graph(g.graph);
    }
    for (Buffer* b : buffers_) backend_.free(b);
}

SamplingIo Engine::sampling_rows(int64_t r0, int64_t n, int step_offset) const {
    SamplingIo io = sampling_;
    io.params = sampling_.params.slice_rows(r0, n);
    io.counts = sampling_.counts.slice_rows(r0, n);
    io.logprobs = sampling_.logprobs.slice_rows(r0, n);
    io.top_ids = sampling_.top_ids.slice_rows(r0, n);
    io.step_offset = step_offset;
    return io;
}

LogitAdjustIo Engine::adjust_rows(int64_t r0, int64_t n) const {
    return LogitAdjustIo{adjust_.flags.slice_rows(r0, n), adjust_.mask.slice_rows(r0, n),
                         adjust_.bias_ids.slice_rows(r0, n), adjust_.bias_values.slice_rows(r0, n)};
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

void Engine::update_bucket() {
    num_seqs_ = 0;
    for (int row = 0; row < static_cast<int>(rows_.size()); ++row) {
        if (rows_[static_cast<size_t>(row)].decoding) num_seqs_ = row + 1;
    }
    bucket_ = num_seqs_ > 0 ? batch_bucket(num_seqs_) : 0;
}

DecodeState Engine::step_state(int S) const {
    DecodeState st = state_;
    st.token_ids = state_.token_ids.slice_rows(0, S);
    st.positions = state_.positions.slice_rows(0, S);
    st.slot_mapping = state_.slot_mapping.slice_rows(0, S);
    st.seq_lens = state_.seq_lens.slice_rows(0, S);
    st.block_tables = block_tables_.slice_rows(0, S);
    st.history = history_view(S);
    return st;
}

void Engine::sample_and_advance(const Tensor& logits, const DecodeState& st) {
    const int S = static_cast<int>(logits.rows);
    const Tensor sampled = sampled_.slice_rows(0, S);
    backend_.adjust_logits(logits, adjust_rows(0, S));
    backend_.sample(logits, sampling_rows(0, S, 1), sampled);
    backend_.advance_decode(sampled, st);
}

void Engine::issue_decode_step() {
    const int S = bucket_;
    const DecodeState st = step_state(S);
    StepInputs in;
    in.token_ids = st.token_ids;
    in.positions = st.positions;
    in.slot_mapping = st.slot_mapping;
    in.meta = AttentionMeta{st.block_tables, st.seq_lens, decode_qsl_.slice_rows(0, S + 1), S, opt_.block_size,
                            interleaved_pairs()};
    if (slides()) {
        // The window moves on the device: this step's slots in the sliding pool from its positions.
        in.sliding_block_tables = sliding_tables_.slice_rows(0, S);
        in.sliding_slot_mapping = sliding_slots_.slice_rows(0, S);
        backend_.kv_slots(st.positions, in.sliding_block_tables, opt_.block_size, in.sliding_slot_mapping);
    }
    decoder_->forward(in, S);
    sample_and_advance(decoder_->logits(S), st);
}

void Engine::step() {
    if (num_seqs_ == 0) throw std::logic_error("step() with no decoding sequence");
    write_released_rows();
    move_windows();
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
    end_step();
}

void Engine::move_windows() {
    // A row's window takes a block from its spare ones (and gives one back) once per block_size steps.
    for (int row = 0; slides() && row < num_seqs_; ++row) {
        Row& r = rows_[static_cast<size_t>(row)];
        if (!r.decoding || !map_sliding(r, r.pos, r.pos + 1)) continue;
        backend_.upload(sliding_tables_.slice_rows(row, 1), r.sliding.data());
        ++row_writes_;
        rows_written_ = true;
    }
}

void Engine::end_step() {
    ++steps_;
    ++global_step_;
    logits_rows_ = num_seqs_;
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
    if (logits_rows_ == 0) throw std::logic_error("logits() before any forward that computes logits");
    const Tensor l = decoder_->logits(logits_rows_);
    std::vector<float> out(static_cast<size_t>(l.numel()));
    backend_.download(l, out.data());
    return out;
}

std::vector<float> Engine::prompt_hidden() {
    const Tensor h = decoder_->last_hidden(1);  // a prefill forward is one sequence's
    std::vector<float> out(static_cast<size_t>(h.numel()));
    backend_.download(h, out.data());
    return out;
}

void Engine::finish() {
    for (int row = 0; row < static_cast<int>(rows_.size()); ++row) release(row);
}

}  // namespace tracelm
