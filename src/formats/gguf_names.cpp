#include "formats/gguf_names.h"

#include <cstring>
#include <utility>

namespace tracelm {

std::string gguf_tensor_name(const std::string& hf, bool sandwich_norms) {
    static const std::pair<const char*, const char*> kTop[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
    };
    for (const auto& [from, to] : kTop)
        if (hf == from) return to;
    static const std::pair<const char*, const char*> kLayer[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
        {"self_attn.q_proj.", "attn_q."},
        {"self_attn.k_proj.", "attn_k."},
        {"self_attn.v_proj.", "attn_v."},
        {"self_attn.o_proj.", "attn_output."},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"mlp.gate.weight", "ffn_gate_inp.weight"},  // a mixture-of-experts layer's router
        // Its experts, stacked in one [E, rows, cols] tensor each (llama.cpp's layout; tracelm's name for the stack).
        {"mlp.experts.gate_proj.", "ffn_gate_exps."},
        {"mlp.experts.up_proj.", "ffn_up_exps."},
        {"mlp.experts.down_proj.", "ffn_down_exps."},
        {"mlp.gate_proj.", "ffn_gate."},
        {"mlp.up_proj.", "ffn_up."},
        {"mlp.down_proj.", "ffn_down."},
        // DeepSeek-V3 / V3.2 (llama.cpp's deepseek2 / deepseek32). k_b_proj and v_b_proj are the converter's halves
        // of kv_b_proj (each head's key rows transposed, and its value rows), which the folder has as one tensor.
        {"self_attn.q_a_proj.", "attn_q_a."},
        {"self_attn.q_a_layernorm.", "attn_q_a_norm."},
        {"self_attn.q_b_proj.", "attn_q_b."},
        {"self_attn.kv_a_proj_with_mqa.", "attn_kv_a_mqa."},
        {"self_attn.kv_a_layernorm.", "attn_kv_a_norm."},
        {"self_attn.k_b_proj.", "attn_k_b."},
        {"self_attn.v_b_proj.", "attn_v_b."},
        {"self_attn.indexer.wq_b.", "indexer.attn_q_b."},
        {"self_attn.indexer.wk.", "indexer.attn_k."},
        {"self_attn.indexer.k_norm.", "indexer.k_norm."},
        {"self_attn.indexer.weights_proj.", "indexer.proj."},
        {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
        {"mlp.shared_experts.gate_proj.", "ffn_gate_shexp."},
        {"mlp.shared_experts.up_proj.", "ffn_up_shexp."},
        {"mlp.shared_experts.down_proj.", "ffn_down_shexp."},
    };
    const std::string prefix = "model.layers.";
    if (hf.rfind(prefix, 0) == 0) {
        const size_t dot = hf.find('.', prefix.size());
        if (dot == std::string::npos) return hf;
        const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
        const std::string rest = hf.substr(dot + 1);
        if (sandwich_norms && rest == "post_attention_layernorm.weight") return "blk." + layer + ".post_attention_norm.weight";
        for (const auto& [from, to] : kLayer) {
            const size_t n = std::strlen(from);
            if (rest.compare(0, n, from) == 0) return "blk." + layer + "." + to + rest.substr(n);
        }
    }
    return hf;
}

}  // namespace tracelm
