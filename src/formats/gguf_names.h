// Tensor names in GGUF files: llama.cpp's names for the Hugging Face ones.
#pragma once

#include <string>

namespace tracelm {

// The GGUF tensor name of a Hugging Face one ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"); names it does not know come back unchanged. In models with four norms per layer
// (sandwich_norms: Gemma) post_attention_layernorm is the norm of the attention's output (post_attention_norm), in
// the others the MLP's input norm (ffn_norm).
std::string gguf_tensor_name(const std::string& hf_name, bool sandwich_norms = false);

}  // namespace tracelm
