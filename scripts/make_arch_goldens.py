#!/usr/bin/env python3
"""One-off generator of small Qwen2 / Llama / Mistral checkpoints and their transformers goldens
for tests/model/test_arch_goldens.cpp (not run in CI; needs torch and transformers).

Each model is written by transformers itself (save_pretrained, safetensors) with random weights at a
small geometry and a small vocabulary, so the files stay small enough to commit. The goldens hold the
full logits of prefill and greedy decode steps for a few id prompts, computed by the model transformers
loads back from the folder, and its RoPE inverse frequencies (inv_freq).

Two Llamas use RoPE scaling: "llama3" (Llama 3.1's per-frequency rule) with original_max_position_embeddings
32, so that the rule's three bands (kept, smoothed, divided by factor) all occur at head_dim 32 and the
scaling changes the logits within the prompts; and "linear". The llama3 one's config.json is rewritten to
the older spelling Meta's Llama 3.1 files use (top-level rope_theta, rope_scaling) before it is loaded back;
the linear one keeps transformers v5's rope_parameters. A longer prompt takes their positions up to 95.

  /tmp/g/bin/python scripts/make_arch_goldens.py --out testdata/models [--only tiny-llama3-rope ...]
"""
import argparse
import json
import os

import torch
import transformers
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6, initializer_range=0.25)
MODELS = {
    "tiny-qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(rope_theta=1000000.0, tie_word_embeddings=True)),
    "tiny-llama": (LlamaConfig, LlamaForCausalLM, dict(rope_theta=500000.0, tie_word_embeddings=False)),
    "tiny-mistral": (MistralConfig, MistralForCausalLM, dict(rope_theta=10000.0, tie_word_embeddings=False,
                                                            sliding_window=None, head_dim=32)),
    "tiny-llama3-rope": (LlamaConfig, LlamaForCausalLM, dict(
        tie_word_embeddings=False, head_dim=32,
        rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=32))),
    "tiny-llama-linear-rope": (LlamaConfig, LlamaForCausalLM, dict(
        tie_word_embeddings=False, rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=4.0))),
    # Gemma 3: a window of 8 on three of four layers, so prompts and decode outgrow it; the global layer's RoPE
    # scaled linearly (as in Gemma 3 4B and up) and the local ones on their own base; query_pre_attn_scalar other
    # than head_dim; GELU-tanh; (1 + w) norms, four per layer, and q/k norms.
    "tiny-gemma3": (Gemma3TextConfig, Gemma3ForCausalLM, dict(
        tie_word_embeddings=True, head_dim=32, num_hidden_layers=4, sliding_window=8, query_pre_attn_scalar=24,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        hidden_activation="gelu_pytorch_tanh",
        rope_parameters={"full_attention": dict(rope_type="linear", rope_theta=1000000.0, factor=4.0),
                         "sliding_attention": dict(rope_type="default", rope_theta=10000.0)})),
}
# Models whose RoPE differs per layer type: no single inv_freq to record.
PER_LAYER_ROPE = {"tiny-gemma3"}
LEGACY_ROPE_CONFIG = {"tiny-llama3-rope"}
PROMPTS = [[1, 2, 3, 4, 5], [100, 7, 300, 42], [511, 0, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 9]]
LONG_PROMPT = [(37 * i + 11) % 512 for i in range(75)]
ROPE_SCALED = {"tiny-llama3-rope", "tiny-llama-linear-rope"}
LONG_PROMPTS = ROPE_SCALED | {"tiny-gemma3"}
STEPS = 20


def to_legacy_rope_config(d):
    """Rewrites config.json from v5's rope_parameters to rope_theta + rope_scaling."""
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", help="write only these models (default: all)")
    args = ap.parse_args()
    for seed, (name, (cfg_cls, model_cls, extra)) in enumerate(MODELS.items()):
        if args.only and name not in args.only:
            continue
        torch.manual_seed(1000 + seed)
        cfg = cfg_cls(**{**COMMON, **extra})
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
        if name in LEGACY_ROPE_CONFIG:
            to_legacy_rope_config(d)
        made = None if name in PER_LAYER_ROPE else model.model.rotary_emb.inv_freq.clone()
        model = model_cls.from_pretrained(d, dtype=torch.float32).eval()
        inv_freq = None
        if made is not None:
            inv_freq = model.model.rotary_emb.inv_freq.clone()
            # The folder as written must give the frequencies the model was made with, and scaling must be in effect.
            assert torch.equal(inv_freq, made), name
            hd = model.config.head_dim
            plain = 1.0 / (model.config.rope_parameters["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
            assert torch.equal(inv_freq, plain) == (name not in ROPE_SCALED), name
            print(name, "frequency divisors:", [round(float(x), 4) for x in plain / inv_freq])
        records = []
        with torch.no_grad():
            for ids in PROMPTS + ([LONG_PROMPT] if name in LONG_PROMPTS else []):
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
        goldens = {"generator": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                                f"{model_cls.__name__} float32", "prompts": records}
        if inv_freq is not None:
            goldens["inv_freq"] = [float(x) for x in inv_freq]
        with open(os.path.join(d, "goldens.json"), "w") as f:
            json.dump(goldens, f)
            f.write("\n")


if __name__ == "__main__":
    main()
