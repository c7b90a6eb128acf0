#include "engine/engine.h"

#include <algorithm>
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
}  // namespace

Engine::Engine(const Model& model, Backend& backend, EngineOptions options)
    : model_(model), backend_(backend), opt_(options), max_rows_(batch_bucket(options.max_seqs)) {
    const ModelConfig& c = model.config();
    if (opt_.block_size <= 0 || opt_.max_seqs <= 0 || opt_.prefill_chunk <= 0 || opt_.context <= 0) {
        throw std::invalid_argument("engine: block size, sequences, prefill chunk and context must be positive");
    }
    context_ = std::min<int64_t>(opt_.context, c.max_position_embeddings);
    max_blocks_ = static_cast<int>((context_ + opt_.block_size - 1) / opt_.block_size);
    const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
    kv_ = std::make_unique<PagedKvCache>(backend, c.num_hidden_layers, kv_dim, max_blocks_ * opt_.max_seqs,
                                         opt_.block_size, kv_dtype_for(model, opt_));
    cache_ = std::make_unique<PrefixCache>(max_blocks_ * opt_.max_seqs, opt_.block_size,
                                           prefix_seed(model, kv_->dtype(), opt_.block_size));
    decoder_ = std::make_unique<Decoder>(model, backend, *kv_, std::max(opt_.prefill_chunk, max_rows_), max_rows_);

    pf_ids_ = i32("prefill.token_ids", opt_.prefill_chunk);
    pf_pos_ = i32("prefill.positions", opt_.prefill_chunk);
    pf_slots_ = i32("prefill.slot_mapping", opt_.prefill_chunk);
    pf_qsl_ = i32("prefill.query_start_loc", 2);
    pf_seq_len_ = i32("prefill.seq_lens", 1);

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
}

Engine::~Engine() {
    for (const auto& [bucket, g] : graphs_) {
        if (g.graph >= 0) backend_.destroy_graph(g.graph);
    }
    for (Buffer* b : buffers_) backend_.free(b);
}

bool Engine::captured() const {
    const auto it = graphs_.find(bucket_);
    return it != graphs_.end() && it->second.graph >= 0;
}

size_t Engine::graph_ops() const { return captured() ? backend_.graph_nodes(graphs_.at(bucket_).graph) : 0; }

SamplingIo Engine::sampling_rows(int64_t r0, int64_t n, int step_offset) const {
    SamplingIo io = sampling_;
    io.params = sampling_.params.slice_rows(r0, n);
    io.counts = sampling_.counts.slice_rows(r0, n);
    io.logprobs = sampling_.logprobs.slice_rows(r0, n);
    io.top_ids = sampling_.top_ids.slice_rows(r0, n);
    io.step_offset = step_offset;
    return io;
}

std::vector<int32_t> Engine::start(const std::vector<std::vector<int32_t>>& prompts, int max_new_tokens,
                                   const std::vector<sampling::RowParams>& params) {
    const ModelConfig& c = model_.config();
    const int S = static_cast<int>(prompts.size());
    if (S == 0) throw std::runtime_error("no prompts given");
    if (S > opt_.max_seqs) {
        throw std::runtime_error(std::to_string(S) + " sequences requested, the engine was built for " +
                                 std::to_string(opt_.max_seqs));
    }
    if (max_new_tokens < 1) throw std::runtime_error("max new tokens must be at least 1");
    if (!params.empty() && params.size() != prompts.size())
        throw std::runtime_error("sampling parameters must be given for every sequence or none");
    for (const sampling::RowParams& p : params) sampling::check_params(p);
    for (const auto& p : prompts) {
        if (p.empty()) throw std::runtime_error("empty prompt");
        for (int32_t id : p) {
            if (id < 0 || id >= c.vocab_size) {
                throw std::runtime_error("invalid token id " + std::to_string(id) + " (vocabulary size " +
                                         std::to_string(c.vocab_size) + ")");
            }
        }
        const int64_t need = static_cast<int64_t>(p.size()) + max_new_tokens;
        if (need > context_) {
            throw std::runtime_error("prompt of " + std::to_string(p.size()) + " tokens plus " +
                                     std::to_string(max_new_tokens) + " new tokens exceeds the context of " +
                                     std::to_string(context_) + " tokens");
        }
    }
    finish();

    // Reserve every block the request can touch up front, so decode never allocates: a prompt's leading cached
    // blocks are shared, the rest are fresh. Rows past S (the bucket's padding and unused rows) have no blocks.
    std::vector<int32_t> table(static_cast<size_t>(max_rows_) * max_blocks_, -1);
    std::vector<int> shared(static_cast<size_t>(S), 0);
    try {
        for (int s = 0; s < S; ++s) {
            const auto& p = prompts[static_cast<size_t>(s)];
            const int64_t n = static_cast<int64_t>(p.size());
            std::vector<int32_t> b =
                opt_.prefix_cache ? cache_->match(p.data(), shareable_blocks(n)) : std::vector<int32_t>{};
            shared[static_cast<size_t>(s)] = static_cast<int>(b.size());
            blocks_.push_back(b);  // held from here on, so finish() releases them if the rest fails
            const std::vector<int32_t> fresh =
                cache_->allocate(kv_->blocks_for(n + max_new_tokens) - static_cast<int>(b.size()));
            std::vector<int32_t>& row = blocks_.back();
            row.insert(row.end(), fresh.begin(), fresh.end());
            std::copy(row.begin(), row.end(), table.begin() + static_cast<int64_t>(s) * max_blocks_);
        }
    } catch (...) {
        finish();
        throw;
    }
    backend_.upload(block_tables_, table.data());
    num_seqs_ = S;
    bucket_ = batch_bucket(S);

    // Sampling state of every row of the bucket: padding rows sample greedily. Draw numbers count from the
    // token after the prompt (step 0, offset 0), then step + 1 in decode.
    params_ = params.empty() ? std::vector<sampling::RowParams>(static_cast<size_t>(S)) : params;
    {
        const int64_t V = c.vocab_size;
        std::vector<sampling::RowParams> rows(static_cast<size_t>(bucket_));
        std::copy(params_.begin(), params_.end(), rows.begin());
        std::vector<int32_t> counts(static_cast<size_t>(bucket_ * V), 0);
        for (int s = 0; s < S; ++s) {
            for (int32_t id : prompts[static_cast<size_t>(s)]) counts[static_cast<size_t>(s * V + id)] |= sampling::kPromptBit;
        }
        backend_.upload(sampling_.params.slice_rows(0, bucket_), rows.data());
        backend_.upload(sampling_.counts.slice_rows(0, bucket_), counts.data());
        const int32_t zero = 0;
        backend_.upload(state_.step, &zero);
    }

    const int bs = opt_.block_size;
    auto slot_of = [&](int s, int64_t pos) {
        return blocks_[static_cast<size_t>(s)][static_cast<size_t>(pos / bs)] * bs + static_cast<int32_t>(pos % bs);
    };

    std::vector<int32_t> first(static_cast<size_t>(S));
    const int64_t C = opt_.prefill_chunk;
    for (int s = 0; s < S; ++s) {
        const auto& p = prompts[static_cast<size_t>(s)];
        const int64_t n = static_cast<int64_t>(p.size());
        // Chunks end at the multiples of prefill_chunk, where a run without shared blocks cuts them too.
        // `canonical_end`: positions before it were computed in a forward of as many rows (one, or several) as any
        // prompt's non-final position is, so their blocks may be shared with later prompts.
        int64_t canonical_end = n;
        for (int64_t c0 = static_cast<int64_t>(shared[static_cast<size_t>(s)]) * bs; c0 < n;) {
            const int64_t c1 = std::min(n, (c0 / C + 1) * C);
            const int T = static_cast<int>(c1 - c0);
            if ((T >= 2) != (C >= 2)) canonical_end = std::min(canonical_end, c0);
            std::vector<int32_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(T));
            for (int i = 0; i < T; ++i) {
                pos[static_cast<size_t>(i)] = static_cast<int32_t>(c0 + i);
                slots[static_cast<size_t>(i)] = slot_of(s, c0 + i);
            }
            const int32_t qsl[2] = {0, T};
            const int32_t seq_len = static_cast<int32_t>(c1);
            StepInputs in;
            in.token_ids = pf_ids_.slice_rows(0, T);
            in.positions = pf_pos_.slice_rows(0, T);
            in.slot_mapping = pf_slots_.slice_rows(0, T);
            backend_.upload(in.token_ids, p.data() + c0);
            backend_.upload(in.positions, pos.data());
            backend_.upload(in.slot_mapping, slots.data());
            backend_.upload(pf_qsl_, qsl);
            backend_.upload(pf_seq_len_, &seq_len);
            in.meta = AttentionMeta{block_tables_.slice_rows(s, 1), pf_seq_len_, pf_qsl_, 1, bs, interleaved_pairs()};
            decoder_->forward(in, T);
            c0 = c1;
        }
        if (opt_.prefix_cache) {
            cache_->publish(blocks_[static_cast<size_t>(s)], p.data(), static_cast<int>(canonical_end / bs));
        }
        backend_.sample(decoder_->logits(1), sampling_rows(s, 1, 0), sampled_.slice_rows(s, 1));
    }
    backend_.download(sampled_.slice_rows(0, S), first.data());

    // Seed the device-side decode state: the first sampled token is fed at position = prompt length.
    // Padding rows of the bucket get token 0 at position 0, slot -1 and length 0.
    const int B = bucket_;
    std::vector<int32_t> ids(static_cast<size_t>(B), 0), pos(static_cast<size_t>(B), 0),
        slots(static_cast<size_t>(B), -1), lens(static_cast<size_t>(B), 0);
    for (int s = 0; s < S; ++s) {
        const int64_t n = static_cast<int64_t>(prompts[static_cast<size_t>(s)].size());
        ids[static_cast<size_t>(s)] = first[static_cast<size_t>(s)];
        pos[static_cast<size_t>(s)] = static_cast<int32_t>(n);
        slots[static_cast<size_t>(s)] = slot_of(s, n);
        lens[static_cast<size_t>(s)] = static_cast<int32_t>(n + 1);
    }
    const int32_t zero = 0;
    backend_.upload(state_.token_ids.slice_rows(0, B), ids.data());
    backend_.upload(state_.positions.slice_rows(0, B), pos.data());
    backend_.upload(state_.slot_mapping.slice_rows(0, B), slots.data());
    backend_.upload(state_.seq_lens.slice_rows(0, B), lens.data());
    backend_.upload(state_.step, &zero);
    steps_ = 0;
    return first;
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

void Engine::step() {
    if (num_seqs_ == 0) throw std::logic_error("step() before start()");
    const bool use_graph = opt_.capture && backend_.supports_capture();
    BucketGraph& g = graphs_[bucket_];
    if (!use_graph || !g.warmed) {
        // Eager decode, which also serves as the warm-up that exercises the exact ops to capture (and lets
        // a backend size its scratch before capture).
        issue_decode_step();
        g.warmed = true;
    } else {
        if (g.graph < 0) {
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
        // Capturing records without executing; the replay produces this step's result.
        backend_.replay(g.graph);
        ++replays_;
    }
    ++steps_;
}

std::vector<int32_t> Engine::sampled() {
    std::vector<int32_t> out(static_cast<size_t>(num_seqs_));
    backend_.download(sampled_.slice_rows(0, num_seqs_), out.data());
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

std::vector<TokenLogprobs> Engine::logprobs() {
    const int S = num_seqs_;
    std::vector<float> lp(static_cast<size_t>(S) * (1 + sampling::kMaxLogprobs));
    std::vector<int32_t> top(static_cast<size_t>(S) * sampling::kMaxLogprobs);
    const std::vector<int32_t> ids = sampled();
    backend_.download(sampling_.logprobs.slice_rows(0, S), lp.data());
    backend_.download(sampling_.top_ids.slice_rows(0, S), top.data());
    std::vector<TokenLogprobs> out(static_cast<size_t>(S));
    for (int s = 0; s < S; ++s) {
        const int n = params_[static_cast<size_t>(s)].logprobs;
        if (n < 0) continue;
        TokenLogprobs& t = out[static_cast<size_t>(s)];
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

int Engine::shareable_blocks(int64_t n) const {
    const int bs = opt_.block_size;
    const int64_t C = opt_.prefill_chunk;
    int k = static_cast<int>((n - 1) / bs);
    for (; k > 0; --k) {
        const int64_t p = static_cast<int64_t>(k) * bs, c0 = p / C * C, c1 = std::min(n, c0 + C);
        if (c1 - p >= 2 || c1 - c0 < 2) break;
    }
    return k;
}

void Engine::finish() {
    for (const auto& b : blocks_) cache_->release(b);
    blocks_.clear();
    num_seqs_ = 0;
}

}  // namespace tracelm
