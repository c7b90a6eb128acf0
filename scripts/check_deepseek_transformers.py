#!/usr/bin/env python3
"""Compares scripts/deepseek_reference.py with transformers on a DeepSeek-V3.2 checkpoint folder (not run in CI;
needs torch and transformers >= 5 with models/deepseek_v32).

  dense:  transformers' DeepseekV3ForCausalLM (MLA + MoE, no indexer) on the same weights, against the reference's
          --dense output;
  sparse: transformers' DeepseekV32ForCausalLM (with the indexer) against the reference's default (sparse) output.

Both run in float64 with the eager attention, recomputing the whole sequence each greedy step (use_cache=False),
and also once with the cache (generate) to check the cached path gives the same greedy tokens. Prints one JSON line
per mode: the largest relative logit difference max|a-b| / max|b| over every step, and whether the greedy tokens match.

  /tmp/dsvenv/bin/python scripts/check_deepseek_transformers.py MODEL_DIR --prompt 1,2,3 --steps 6
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def reference(model, prompts, steps, dense):
    cmd = [sys.executable, os.path.join(HERE, "deepseek_reference.py"), model, "--steps", str(steps), "--full-logits"]
    for p in prompts:
        cmd += ["--prompt", p]
    if dense:
        cmd.append("--dense")
    return json.loads(subprocess.check_output(cmd))


def v3_folder(model, tmp):
    """The same weights presented as deepseek_v3 (the indexer's tensors become unused keys)."""
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    cfg["model_type"] = "deepseek_v3"
    cfg["architectures"] = ["DeepseekV3ForCausalLM"]
    for k in ("index_n_heads", "index_head_dim", "index_topk"):
        cfg.pop(k, None)
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f)
    for fn in os.listdir(model):
        if fn.endswith(".safetensors"):
            shutil.copy(os.path.join(model, fn), os.path.join(tmp, fn))
    return tmp


def run_hf(cls, folder, prompts, steps):
    m = cls.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager",
                              experts_implementation="eager")
    m.eval()
    out = []
    with torch.no_grad():
        for p in prompts:
            seq = [int(x) for x in p.split(",")]
            n0, logits = len(seq), []
            for _ in range(steps):
                lg = m(torch.tensor([seq]), use_cache=False).logits[0, -1].numpy()
                logits.append(lg)
                seq.append(int(np.argmax(lg)))
            gen = m.generate(torch.tensor([seq[:n0]]), max_new_tokens=steps, do_sample=False,
                             use_cache=True).tolist()[0][n0:]
            out.append({"tokens": seq[n0:], "cached_tokens": gen, "logits": logits})
    return out


def compare(ref, hf):
    worst, tokens_equal, cached_equal = 0.0, True, True
    for r, h in zip(ref["prompts"], hf):
        for st, lg in zip(r["steps"], h["logits"]):
            a = np.asarray(st["logits"])
            worst = max(worst, float(np.max(np.abs(a - lg)) / np.max(np.abs(lg))))
        tokens_equal &= r["tokens"] == h["tokens"]
        cached_equal &= r["tokens"] == h["cached_tokens"]
    return {"max_rel_logit_diff": worst, "greedy_equal": tokens_equal, "cached_generate_equal": cached_equal,
            "ref_tokens": [r["tokens"] for r in ref["prompts"]], "hf_tokens": [h["tokens"] for h in hf],
            "hf_cached_tokens": [h["cached_tokens"] for h in hf]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--prompt", action="append", required=True)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    import transformers
    from transformers import DeepseekV3ForCausalLM
    with tempfile.TemporaryDirectory() as tmp:
        hf = run_hf(DeepseekV3ForCausalLM, v3_folder(args.model, os.path.join(tmp, "v3")), args.prompt, args.steps)
    res = compare(reference(args.model, args.prompt, args.steps, True), hf)
    print(json.dumps({"mode": "dense", "hf": "DeepseekV3ForCausalLM", "transformers": transformers.__version__,
                      **res}))
    try:
        from transformers import DeepseekV32ForCausalLM
    except ImportError:
        print(json.dumps({"mode": "sparse", "skipped": "transformers has no DeepseekV32ForCausalLM"}))
        return
    hf = run_hf(DeepseekV32ForCausalLM, args.model, args.prompt, args.steps)
    res = compare(reference(args.model, args.prompt, args.steps, False), hf)
    print(json.dumps({"mode": "sparse", "hf": "DeepseekV32ForCausalLM", "transformers": transformers.__version__,
                      **res}))


if __name__ == "__main__":
    main()
