#!/usr/bin/env python3
"""One-off generator of small Qwen2 / Llama / Mistral checkpoints and their transformers goldens
for tests/test_arch_goldens.cpp (not run in CI; needs torch and transformers).

Each model is written by transformers itself (save_pretrained, safetensors) with random weights at a
small geometry and a small vocabulary, so the files stay small enough to commit. The goldens hold the
full logits of prefill and greedy decode steps for a few id prompts.

  /tmp/g/bin/python scripts/make_arch_goldens.py --out testdata/models
"""
import argparse
import json
import os

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6, initializer_range=0.25)
MODELS = {
    "tiny-qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(rope_theta=1000000.0, tie_word_embeddings=True)),
    "tiny-llama": (LlamaConfig, LlamaForCausalLM, dict(rope_theta=500000.0, tie_word_embeddings=False)),
    "tiny-mistral": (MistralConfig, MistralForCausalLM, dict(rope_theta=10000.0, tie_word_embeddings=False,
                                                            sliding_window=None, head_dim=32)),
}
PROMPTS = [[1, 2, 3, 4, 5], [100, 7, 300, 42], [511, 0, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 9]]
STEPS = 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for seed, (name, (cfg_cls, model_cls, extra)) in enumerate(MODELS.items()):
        torch.manual_seed(1000 + seed)
        cfg = cfg_cls(**COMMON, **extra)
        model = model_cls(cfg).eval()
        # The default init zeroes biases and sets norm weights to one; randomise both so the test
        # proves they are applied.
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if pname.endswith("bias"):
                    p.normal_(0.0, 0.3)
                elif "norm" in pname:
                    p.uniform_(0.8, 1.2)
        d = os.path.join(args.out, name)
        model.save_pretrained(d, safe_serialization=True)
        records = []
        with torch.no_grad():
            for ids in PROMPTS:
                out = model(torch.tensor([ids]), use_cache=True)
                past, logits = out.past_key_values, out.logits[0, -1]
                rows, tokens = [], []
                for step in range(STEPS + 1):
                    rows.append([float(v) for v in logits])
                    nxt = int(torch.argmax(logits))
                    tokens.append(nxt)
                    if step == STEPS:
                        break
                    out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                    past, logits = out.past_key_values, out.logits[0, -1]
                records.append({"prompt_ids": ids, "tokens": tokens, "logits": rows})
        with open(os.path.join(d, "goldens.json"), "w") as f:
            json.dump({"generator": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                                    f"{model_cls.__name__} float32", "prompts": records}, f)
            f.write("\n")


if __name__ == "__main__":
    main()
