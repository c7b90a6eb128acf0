#include "model/decoder.h"

#include <algorithm>

#include "ops/dsa/dsa_topk.h"

namespace tracelm {

Tensor Decoder::activation(const std::string& name, int64_t rows, int64_t cols) {
    Buffer* b = backend_.alloc(static_cast<size_t>(rows * cols) * sizeof(float), name);
    buffers_.push_back(b);
    return whole(b, DType::F32, rows, cols);
}

Decoder::Decoder(const Model& model, Backend& backend, PagedKvCache& kv, int max_rows, int max_seqs,
                 int64_t max_context, bool dense_attention)
    : model_(model), backend_(backend), kv_(kv), max_rows_(max_rows), dense_attention_(dense_attention) {
    const ModelConfig& c = model.config();
    const int64_t q_dim = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
    x_ = activation("hidden", max_rows, c.hidden_size);
    h_ = activation("normed", max_rows, c.hidden_size);
    if (c.mla) {
        const ModelConfig::Mla& m = *c.mla;
        const int64_t heads = c.num_attention_heads;
        q_a_ = activation("q_latent", max_rows, m.q_lora_rank);
        c_ = activation("kv_latent", max_rows, m.kv_lora_rank);
        k_pe_ = activation("k_pe", max_rows, m.qk_rope_head_dim);
        q_nope_ = activation("q_nope", max_rows, heads * m.qk_nope_head_dim);
        q_pe_ = activation("q_pe", max_rows, heads * m.qk_rope_head_dim);
        q_lat_ = activation("q_absorbed", max_rows, heads * m.kv_lora_rank);
        o_lat_ = activation("attn_latent", max_rows, heads * m.kv_lora_rank);
        o_ = activation("attn_out", max_rows, heads * m.v_head_dim);
        if (c.num_experts > 0) shared_ = activation("shared_experts", max_rows, c.hidden_size);
        if (m.index_n_heads > 0) {
            if (max_context <= 0) throw std::invalid_argument("decoder: the indexer needs the longest context");
            iq_ = activation("indexer_q", max_rows, static_cast<int64_t>(m.index_n_heads) * m.index_head_dim);
            ik_ = activation("indexer_k", max_rows, m.index_head_dim);
            iw_ = activation("indexer_weights", max_rows, m.index_n_heads);
            scores_ = activation("indexer_scores", max_rows, max_context);
            buffers_.push_back(backend_.alloc(static_cast<size_t>(max_rows) * m.index_topk * sizeof(int64_t),
                                              "indexer_selected"));
            selected_ = whole(buffers_.back(), DType::I64, max_rows, m.index_topk);
            topk_ws_ = dsa::make_topk_workspace(backend_, max_rows, max_context);
            buffers_.push_back(topk_ws_.buffer);
        }
    } else {
        q_ = activation("q", max_rows, q_dim);
        k_ = activation("k", max_rows, kv_dim);
        v_ = activation("v", max_rows, kv_dim);
        attn_ = activation("attn_out", max_rows, q_dim);
    }
    proj_ = activation("proj", max_rows, c.hidden_size);
    // DeepSeek's shared experts use the dense MLP's scratch.
    const int64_t mlp_width = std::max<int64_t>(
        c.intermediate_size, c.mla ? static_cast<int64_t>(c.moe_intermediate_size) * c.mla->n_shared_experts : 0);
    gate_ = activation("mlp_gate", max_rows, mlp_width);
    up_ = activation("mlp_up", max_rows, mlp_width);
    last_ = activation("last_hidden", max_seqs, c.hidden_size);
    last_proj_ = activation("last_proj", max_seqs, c.hidden_size);
    logits_ = activation("logits", max_seqs, c.vocab_size);
    if (c.num_experts > 0) {
        router_logits_ = activation("router_logits", max_rows, c.num_experts);
        expert_weights_ = activation("expert_weights", max_rows, c.num_experts_per_tok);
        buffers_.push_back(backend_.alloc(static_cast<size_t>(max_rows) * c.num_experts_per_tok * sizeof(int32_t),
                                          "expert_ids"));
        expert_ids_ = whole(buffers_.back(), DType::I32, max_rows, c.num_experts_per_tok);
    }
}

Decoder::~Decoder() {
    for (Buffer* b : buffers_) backend_.free(b);
}

void Decoder::forward(const StepInputs& in, int T, bool with_logits, int64_t batch_rows, bool all_rows,
                      int single_rows) {
    const ModelConfig& c = model_.config();
    const ModelWeights& w = model_.weights();
    const float eps = static_cast<float>(c.rms_norm_eps);
    const int S = in.meta.num_seqs;

    // The MLP's scratch may be wider than the dense MLP (DeepSeek's shared experts).
    const auto mlp_rows = [&](const Tensor& t, int64_t rows) { return whole(t.buf, DType::F32, rows, c.intermediate_size); };
    const Tensor x = x_.slice_rows(0, T), h = h_.slice_rows(0, T), proj = proj_.slice_rows(0, T),
                 gate = mlp_rows(gate_, T), up = mlp_rows(up_, T);

    backend_.embedding(in.token_ids, w.embed, c.embed_scale, x);
    backend_.rms_norm(x, w.layers.front().input_norm, eps, h);
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const LayerWeights& L = w.layers[l];
        const int layer = static_cast<int>(l);
        const bool last_layer = l + 1 == w.layers.size();
        // h holds this layer's normed input (the previous layer's last residual add was fused with the norm).
        const bool cache_only = last_layer && !with_logits && !all_rows;
        if (!(L.mla ? latent_attention(L, layer, in, h, proj, batch_rows, cache_only)
                    : attention(L, layer, in, h, proj, batch_rows, cache_only)))
            return;
        if (L.attn_out_norm) backend_.rms_norm(proj, *L.attn_out_norm, eps, proj);
        if (last_layer) break;
        backend_.add_rms_norm(x, proj, L.post_norm, eps, h);
        mlp(L, h, gate, up, proj, batch_rows, single_rows);
        if (L.mlp_out_norm) backend_.rms_norm(proj, *L.mlp_out_norm, eps, proj);
        backend_.add_rms_norm(x, proj, w.layers[l + 1].input_norm, eps, h);
    }
    // The last layer from its attention output on, for each sequence's last row only (llama.cpp's GET_ROWS by
    // out_ids): the residual stream and the projection of those rows, then the FFN, the final norm and the LM head
    // on S rows, each row its own sequence's (batch_rows 1, as llama.cpp's products of n_outputs = 1 row).
    const LayerWeights& L = w.layers.back();
    const Tensor xl = last_.slice_rows(0, S), pl = last_proj_.slice_rows(0, S), hl = h_.slice_rows(0, S),
                 gl = mlp_rows(gate_, S), ul = mlp_rows(up_, S);
    if (with_logits) {  // gathered before all_rows works on x and proj in place
        backend_.gather_last(x, in.meta.query_start_loc, xl);
        backend_.gather_last(proj, in.meta.query_start_loc, pl);
    }
    if (all_rows) {
        backend_.add_rms_norm(x, proj, L.post_norm, eps, h);
        mlp(L, h, gate, up, proj, batch_rows);
        if (L.mlp_out_norm) backend_.rms_norm(proj, *L.mlp_out_norm, eps, proj);
        backend_.add(x, proj, x);
        backend_.rms_norm(x, w.final_norm, eps, x);
    }
    if (!with_logits) return;
    backend_.add_rms_norm(xl, pl, L.post_norm, eps, hl);
    mlp(L, hl, gl, ul, pl, 1);
    if (L.mlp_out_norm) backend_.rms_norm(pl, *L.mlp_out_norm, eps, pl);
    backend_.add(xl, pl, xl);
    backend_.rms_norm(xl, w.final_norm, eps, xl);
    backend_.matmul(xl, w.lm_head, nullptr, logits_.slice_rows(0, S));
}

bool Decoder::attention(const LayerWeights& L, int layer, const StepInputs& in, const Tensor& h, const Tensor& proj,
                        int64_t batch_rows, bool cache_only) {
    const ModelConfig& c = model_.config();
    const int H = c.num_attention_heads, KV = c.num_key_value_heads, hd = c.head_dim;
    // Gemma scales q before attention, as llama.cpp does (the f16 rounding of q tells the two orders apart).
    const float q_scale = c.arch == Arch::Gemma3 ? c.attention_scale() : 1.0f;
    const float scale = c.arch == Arch::Gemma3 ? 1.0f : c.attention_scale();
    const int64_t T = h.rows;
    const Tensor q = q_.slice_rows(0, T), k = k_.slice_rows(0, T), v = v_.slice_rows(0, T),
                 attn = attn_.slice_rows(0, T);
    const MatmulOut qkv[] = {{&L.q_proj, L.q_bias ? &*L.q_bias : nullptr, q},
                             {&L.k_proj, L.k_bias ? &*L.k_bias : nullptr, k},
                             {&L.v_proj, L.v_bias ? &*L.v_bias : nullptr, v}};
    backend_.matmuls(h, qkv, batch_rows);
    const bool own_pool = kv_.in_sliding_pool(layer);
    backend_.qk_norm_rope_kv_write({q, k, v, L.q_norm ? &*L.q_norm : nullptr, L.k_norm ? &*L.k_norm : nullptr,
                                    static_cast<float>(c.rms_norm_eps), in.positions, model_.rope(layer),
                                    own_pool ? in.sliding_slot_mapping : in.slot_mapping, kv_.k(layer), kv_.v(layer),
                                    H, KV, hd, q_scale});
    if (cache_only) return false;
    AttentionMeta meta = in.meta;
    meta.window = c.attention_window(layer);
    if (own_pool) meta.block_tables = in.sliding_block_tables;
    backend_.attention(q, kv_.k(layer), kv_.v(layer), meta, H, KV, hd, scale, attn);
    backend_.matmul(attn, L.o_proj, L.o_bias ? &*L.o_bias : nullptr, proj, batch_rows);
    return true;
}

// DeepSeek's absorbed latent attention (docs/deepseek-v32-plan.md, sections 2, 4-6): the cache row of a token is
// its normed latent and roped shared key; V3.2's indexer keys go to the auxiliary pool and, unless attention is
// dense, pick each query row's index_topk positions.
bool Decoder::latent_attention(const LayerWeights& L, int layer, const StepInputs& in, const Tensor& h,
                               const Tensor& proj, int64_t batch_rows, bool cache_only) {
    const ModelConfig& c = model_.config();
    const ModelConfig::Mla& m = *c.mla;
    const LayerWeights::Mla& w = *L.mla;
    const int heads = c.num_attention_heads, rope = m.qk_rope_head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const RopeSpec rope_spec = model_.rope(layer);
    const int64_t T = h.rows;
    const Tensor q_a = q_a_.slice_rows(0, T), lat = c_.slice_rows(0, T), k_pe = k_pe_.slice_rows(0, T),
                 q_nope = q_nope_.slice_rows(0, T), q_pe = q_pe_.slice_rows(0, T);
    const MatmulOut down[] = {{&w.q_a, nullptr, q_a}, {&w.kv_a, nullptr, lat}, {&w.k_pe, nullptr, k_pe}};
    backend_.matmuls(h, down, batch_rows);
    backend_.rms_norm(q_a, w.q_a_norm, eps, q_a);
    backend_.rms_norm(lat, w.kv_a_norm, eps, lat);
    backend_.rope_neox(k_pe, in.positions, 1, rope, rope_spec);
    const Tensor latent_row[] = {lat, k_pe};
    backend_.cache_write(latent_row, in.slot_mapping, kv_.k(layer));
    if (w.indexer) {
        const Tensor ik = ik_.slice_rows(0, T), iw = iw_.slice_rows(0, T);
        const MatmulOut keys[] = {{&w.indexer->wk, nullptr, ik}, {&w.indexer->weights, nullptr, iw}};
        backend_.matmuls(h, keys, batch_rows);
        backend_.layer_norm(ik, w.indexer->k_norm, w.indexer->k_norm_bias, 1e-6f, ik);
        // The indexer rotates the first rope values of each head (the main attention the last ones).
        backend_.rope_neox(ik, in.positions, 1, rope, rope_spec, m.index_head_dim);
        const Tensor index_row[] = {ik};
        backend_.cache_write(index_row, in.slot_mapping, kv_.aux(layer));
    }
    if (cache_only) return false;
    const MatmulOut up[] = {{&w.q_nope, nullptr, q_nope}, {&w.q_pe, nullptr, q_pe}};
    backend_.matmuls(q_a, up, batch_rows);
    backend_.rope_neox(q_pe, in.positions, heads, rope, rope_spec);
    const Tensor* selected = nullptr;
    Tensor picked;
    if (w.indexer && !dense_attention_) {
        const Tensor iq = iq_.slice_rows(0, T), scores = scores_.slice_rows(0, T);
        picked = selected_.slice_rows(0, T);
        backend_.matmul(q_a, w.indexer->wq, nullptr, iq, batch_rows);
        backend_.rope_neox(iq, in.positions, m.index_n_heads, rope, rope_spec, m.index_head_dim);
        backend_.dsa_indexer_paged(iq, iw_.slice_rows(0, T), kv_.aux(layer), in.meta, m.index_n_heads, scores);
        backend_.dsa_topk_causal(scores, in.meta, topk_ws_, picked);
        selected = &picked;
    }
    const Tensor q_lat = q_lat_.slice_rows(0, T), o_lat = o_lat_.slice_rows(0, T), o = o_.slice_rows(0, T);
    backend_.mla_absorb(q_nope, w.uk, heads, q_lat);
    backend_.mla_attention(q_lat, q_pe, kv_.k(layer), in.meta, selected, heads, c.attention_scale(), o_lat);
    backend_.mla_absorb(o_lat, w.uv, heads, o);
    backend_.matmul(o, L.o_proj, nullptr, proj, batch_rows);
    return true;
}

void Decoder::mlp(const LayerWeights& L, const Tensor& h, const Tensor& gate, const Tensor& up, const Tensor& out,
                  int64_t batch_rows, int single_rows) {
    const ModelConfig& c = model_.config();
    if (!L.experts) {
        const MatmulOut gate_up[] = {{&L.gate_proj, nullptr, gate}, {&L.up_proj, nullptr, up}};
        backend_.matmuls(h, gate_up, batch_rows);
        backend_.glu_matmul(gate, up, c.hidden_act, L.down_proj, out, batch_rows);
        return;
    }
    // Routed on the device: the router's logits, each row's experts and weights, then the experts' FFN.
    const LayerWeights::Experts& e = *L.experts;
    const Tensor logits = router_logits_.slice_rows(0, h.rows), ids = expert_ids_.slice_rows(0, h.rows),
                 weights = expert_weights_.slice_rows(0, h.rows);
    if (c.mla) {
        // DeepSeek: sigmoid scores, group-limited selection (row by row, whatever the batch), then the routed
        // experts plus the shared ones.
        const ModelConfig::Mla& m = *c.mla;
        backend_.moe_route_grouped(h, e.router, *e.selection_bias, m.n_group, m.topk_group, c.norm_topk_prob,
                                   m.routed_scaling_factor, logits, ids, weights);
        backend_.moe_ffn(h, ids, weights, MoeExperts{&e.gate, &e.up, &e.down, c.num_experts, c.hidden_act}, out,
                         single_rows > 0 ? 1 : batch_rows);
        if (m.n_shared_experts == 0) return;
        const Tensor shared = shared_.slice_rows(0, h.rows);
        const int64_t width = static_cast<int64_t>(c.moe_intermediate_size) * m.n_shared_experts;
        const Tensor sg = whole(gate.buf, DType::F32, h.rows, width), su = whole(up.buf, DType::F32, h.rows, width);
        const MatmulOut gate_up[] = {{&L.gate_proj, nullptr, sg}, {&L.up_proj, nullptr, su}};
        backend_.matmuls(h, gate_up, batch_rows);
        backend_.glu_matmul(sg, su, c.hidden_act, L.down_proj, shared, batch_rows);
        backend_.add(out, shared, out);
        return;
    }
    if (single_rows > 0 && single_rows < h.rows) {
        // A mixed step: the decode rows routed as products of one row, the prompt piece's as its forward's.
        const int64_t n = h.rows - single_rows;
        backend_.moe_route(h.slice_rows(0, single_rows), e.router, 1, c.norm_topk_prob, logits.slice_rows(0, single_rows),
                           ids.slice_rows(0, single_rows), weights.slice_rows(0, single_rows));
        backend_.moe_route(h.slice_rows(single_rows, n), e.router, batch_rows, c.norm_topk_prob,
                           logits.slice_rows(single_rows, n), ids.slice_rows(single_rows, n),
                           weights.slice_rows(single_rows, n));
    } else {
        backend_.moe_route(h, e.router, batch_rows, c.norm_topk_prob, logits, ids, weights);
    }
    // Experts whose order depends on the forward's rows (K types, ggml numerics) are never mixed (Engine::can_mix).
    backend_.moe_ffn(h, ids, weights, MoeExperts{&e.gate, &e.up, &e.down, c.num_experts, c.hidden_act}, out,
                     single_rows > 0 ? 1 : batch_rows);
}

void Decoder::lm_head(const Tensor& hidden, const Tensor& out) {
    backend_.matmul(hidden, model_.weights().lm_head, nullptr, out);
}

}  // namespace tracelm
