#include "model/decoder.h"

namespace tracelm {

Tensor Decoder::activation(const std::string& name, int64_t rows, int64_t cols) {
    Buffer* b = backend_.alloc(static_cast<size_t>(rows * cols) * sizeof(float), name);
    buffers_.push_back(b);
    return whole(b, DType::F32, rows, cols);
}

Decoder::Decoder(const Model& model, Backend& backend, PagedKvCache& kv, int max_rows, int max_seqs)
    : model_(model), backend_(backend), kv_(kv), max_rows_(max_rows) {
    const ModelConfig& c = model.config();
    const int64_t q_dim = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
    x_ = activation("hidden", max_rows, c.hidden_size);
    h_ = activation("normed", max_rows, c.hidden_size);
    q_ = activation("q", max_rows, q_dim);
    k_ = activation("k", max_rows, kv_dim);
    v_ = activation("v", max_rows, kv_dim);
    attn_ = activation("attn_out", max_rows, q_dim);
    proj_ = activation("proj", max_rows, c.hidden_size);
    gate_ = activation("mlp_gate", max_rows, c.intermediate_size);
    up_ = activation("mlp_up", max_rows, c.intermediate_size);
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
    const int H = c.num_attention_heads, KV = c.num_key_value_heads, hd = c.head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // Gemma scales q before attention, as llama.cpp does (the f16 rounding of q tells the two orders apart).
    const float q_scale = c.arch == Arch::Gemma3 ? c.attention_scale() : 1.0f;
    const float scale = c.arch == Arch::Gemma3 ? 1.0f : c.attention_scale();
    const int S = in.meta.num_seqs;

    const Tensor x = x_.slice_rows(0, T), h = h_.slice_rows(0, T), q = q_.slice_rows(0, T), k = k_.slice_rows(0, T),
                 v = v_.slice_rows(0, T), attn = attn_.slice_rows(0, T), proj = proj_.slice_rows(0, T),
                 gate = gate_.slice_rows(0, T), up = up_.slice_rows(0, T);

    backend_.embedding(in.token_ids, w.embed, c.embed_scale, x);
    backend_.rms_norm(x, w.layers.front().input_norm, eps, h);
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const LayerWeights& L = w.layers[l];
        const int layer = static_cast<int>(l);
        const bool last_layer = l + 1 == w.layers.size();
        // h holds this layer's normed input (the previous layer's last residual add was fused with the norm).
        const MatmulOut qkv[] = {{&L.q_proj, L.q_bias ? &*L.q_bias : nullptr, q},
                                 {&L.k_proj, L.k_bias ? &*L.k_bias : nullptr, k},
                                 {&L.v_proj, L.v_bias ? &*L.v_bias : nullptr, v}};
        backend_.matmuls(h, qkv, batch_rows);
        const bool own_pool = kv_.in_sliding_pool(layer);
        backend_.qk_norm_rope_kv_write({q, k, v, L.q_norm ? &*L.q_norm : nullptr, L.k_norm ? &*L.k_norm : nullptr, eps,
                                        in.positions, model_.rope(layer),
                                        own_pool ? in.sliding_slot_mapping : in.slot_mapping, kv_.k(layer),
                                        kv_.v(layer), H, KV, hd, q_scale});
        if (last_layer && !with_logits && !all_rows) return;
        AttentionMeta meta = in.meta;
        meta.window = c.attention_window(layer);
        if (own_pool) meta.block_tables = in.sliding_block_tables;
        backend_.attention(q, kv_.k(layer), kv_.v(layer), meta, H, KV, hd, scale, attn);
        backend_.matmul(attn, L.o_proj, L.o_bias ? &*L.o_bias : nullptr, proj, batch_rows);
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
                 gl = gate_.slice_rows(0, S), ul = up_.slice_rows(0, S);
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
