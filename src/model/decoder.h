// The forward pass of the dense decoder, expressed as backend ops over persistent activation
// buffers. The same code issues the eager prefill, the eager decode step and the captured one.
#pragma once

#include <vector>

#include "kv/paged_kv_cache.h"
#include "model/model.h"

namespace tracelm {

// Device inputs of one forward over T tokens of S sequences (i32 tensors).
struct StepInputs {
    Tensor token_ids;     // [1, T]
    Tensor positions;     // [1, T]
    Tensor slot_mapping;  // [1, T]
    AttentionMeta meta;   // S = meta.num_seqs
    // The layers whose K/V are in the cache's sliding pool (PagedKvCache::in_sliding_pool) use these instead.
    Tensor sliding_slot_mapping;   // [1, T]
    Tensor sliding_block_tables;   // [S, max_blocks]
};

class Decoder {
   public:
    // Activations are sized for up to `max_rows` tokens per forward and `max_seqs` sequences; DeepSeek-V3.2's
    // indexer scores up to `max_context` cached positions per row. `dense_attention`: V3.2 attends to every
    // position as V3 does instead of the indexer's top-k (the indexer's keys are cached all the same).
    Decoder(const Model& model, Backend& backend, PagedKvCache& kv, int max_rows, int max_seqs,
            int64_t max_context = 0, bool dense_attention = false);
    ~Decoder();
    Decoder(const Decoder&) = delete;
    Decoder& operator=(const Decoder&) = delete;

    // Enqueues the forward of T tokens; logits() then holds [S, vocab] for each sequence's last token. Without
    // `with_logits` (a prompt piece that samples nothing) the forward stops at the last layer's KV write: what
    // follows only feeds the logits (the LM head alone is about a quarter of the weights a qwen3-0.6b forward
    // reads). batch_rows: the rows of llama.cpp's batch the T rows belong to (a prompt forward of one sequence, of
    // which this may be a piece; 1 when each row is a decode step of its own sequence), which picks the summation
    // order of GGML-quantized matmuls (Backend::matmul). As in llama.cpp, the last layer keeps only each sequence's
    // last row after its attention output projection, so its FFN and the LM head are products of one row each.
    // `single_rows`: the first rows are each a decode row of its own sequence (a mixed step, Engine::mixed_step):
    // ops whose order depends on batch_rows (the MoE router) treat them as products of one row, and the rest as
    // batch_rows'.
    // `all_rows` (a prompt whose tokens are scored) also runs the last layer and the final norm over all T rows:
    // all_hidden(T) then holds each row's hidden state as the LM head reads it (lm_head() gives its logits). The
    // last rows' path (and so the logits) is computed as without it, from the same inputs.
    void forward(const StepInputs& in, int T, bool with_logits = true, int64_t batch_rows = 1, bool all_rows = false,
                 int single_rows = 0);
    Tensor logits(int S) const { return logits_.slice_rows(0, S); }
    Tensor all_hidden(int T) const { return x_.slice_rows(0, T); }
    // The LM head of hidden rows (e.g. rows of all_hidden) into `out` [rows, vocab].
    void lm_head(const Tensor& hidden, const Tensor& out);
    // After a forward with logits: each sequence's last row after the final norm, what the LM head read [S, hidden].
    Tensor last_hidden(int S) const { return last_.slice_rows(0, S); }
    int max_rows() const { return max_rows_; }

   private:
    Tensor activation(const std::string& name, int64_t rows, int64_t cols);
    // The attention of one layer on its normed input h (T rows) into proj, after writing the cache; false when
    // `cache_only` stopped it there.
    bool attention(const LayerWeights& L, int layer, const StepInputs& in, const Tensor& h, const Tensor& proj,
                   int64_t batch_rows, bool cache_only);
    bool latent_attention(const LayerWeights& L, int layer, const StepInputs& in, const Tensor& h,
                          const Tensor& proj, int64_t batch_rows, bool cache_only);
    // The MLP of layer L on h into out: the dense gated MLP (gate and up its scratch), or a mixture-of-experts
    // layer's router, routing and experts.
    void mlp(const LayerWeights& L, const Tensor& h, const Tensor& gate, const Tensor& up, const Tensor& out,
             int64_t batch_rows, int single_rows = 0);

    const Model& model_;
    Backend& backend_;
    PagedKvCache& kv_;
    int max_rows_;
    std::vector<Buffer*> buffers_;
    Tensor x_, h_, q_, k_, v_, attn_, proj_, gate_, up_, last_, last_proj_, logits_;
    Tensor router_logits_, expert_ids_, expert_weights_;  // mixture-of-experts layers: [max_rows, E / k]
    // DeepSeek: the latent attention's activations (LayerWeights::Mla), the shared experts' output, the indexer's
    // queries, keys, head weights, scores, selection and top-k scratch.
    Tensor q_a_, c_, k_pe_, q_nope_, q_pe_, q_lat_, o_lat_, o_, shared_;
    Tensor iq_, ik_, iw_, scores_, selected_;
    DsaTopkWorkspace topk_ws_;
    bool dense_attention_ = false;
};

}  // namespace tracelm
