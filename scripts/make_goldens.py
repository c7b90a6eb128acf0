#!/usr/bin/env python3
"""One-off generator of the Hugging Face transformers goldens for tests/model/test_goldens.cpp: the tiny Qwen3
geometry (Qwen3ForCausalLM) or, with --geometry moe-tiny, the tiny Qwen3-MoE one (Qwen3MoeForCausalLM), or with
--geometry qwen3-30b-a3b-slice --layers 1 --dtype bf16 one layer of Qwen3-30B-A3B's shapes (bf16 weights, computed in
float32; its 1.8 GB checkpoint is named by its sha256 instead of the FNV-1a hash).

Not run in CI. Needs torch and transformers (e.g. `python3 -m venv /tmp/g && /tmp/g/bin/pip install
torch transformers`) and a built `tracelm` binary, which writes the random-weight checkpoint; the
checkpoint's FNV-1a hash is stored so the test can prove it regenerated the very same weights.

  /tmp/g/bin/python scripts/make_goldens.py --tracelm build/tracelm --out testdata/goldens/qwen3_tiny_f32.json
  /tmp/g/bin/python scripts/make_goldens.py --tracelm build/tracelm --geometry moe-tiny \
      --out testdata/goldens/qwen3_moe_tiny_f32.json
  /tmp/g/bin/python scripts/make_goldens.py --tracelm build/tracelm --geometry qwen3-30b-a3b-slice --layers 1 \
      --dtype bf16 --out testdata/goldens/qwen3_30b_a3b_slice_bf16.json
"""
import argparse
import hashlib
import json
import subprocess
import tempfile

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    return",
    "Once upon a time, in a land far away,",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "日本語のテキストです。",
    "1, 2, 3, 4, 5,",
]
DECODE_STEPS = 32
PROBES = 256
TOP = 8


def fnv1a64(path):
    h = 0xCBF29CE484222325
    with open(path, "rb") as f:
        data = f.read()
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def checkpoint_record(args, weights):
    record = {"geometry": args.geometry, "seed": args.seed, "dtype": args.dtype}
    if args.layers:
        record["layers"] = args.layers
    if args.dtype == "f32" and not args.layers:
        record["fnv1a64"] = format(fnv1a64(weights), "016x")
    else:  # too large for a byte-at-a-time hash in Python
        with open(weights, "rb") as f:
            record["sha256"] = hashlib.file_digest(f, "sha256").hexdigest()
    return record


def row_record(logits, probe_ids):
    top = torch.topk(logits, TOP)
    return {
        "probe": [float(logits[i]) for i in probe_ids],
        "top_ids": [int(i) for i in top.indices],
        "top_logits": [float(v) for v in top.values],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tracelm", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--geometry", default="tiny", choices=["tiny", "moe-tiny", "qwen3-30b-a3b-slice"])
    ap.add_argument("--layers", type=int, default=0, help="layers instead of the geometry's (0: its own)")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        cmd = [args.tracelm, "make-checkpoint", "--geometry", args.geometry, "--seed", str(args.seed),
               "--dtype", args.dtype, "--out", d]
        subprocess.run(cmd + (["--layers", str(args.layers)] if args.layers else []), check=True)
        tok = AutoTokenizer.from_pretrained(d)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        vocab = model.config.vocab_size
        gen = torch.Generator().manual_seed(1234)
        probe_ids = sorted(set(torch.randint(0, vocab, (PROBES,), generator=gen).tolist()))

        records = []
        for text in PROMPTS:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            rows, tokens = [], []
            with torch.no_grad():
                out = model(torch.tensor([ids]), use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1]
                for step in range(DECODE_STEPS + 1):
                    rows.append(row_record(logits, probe_ids))
                    # Greedy, lowest index on ties (torch.argmax returns the first maximum).
                    nxt = int(torch.argmax(logits))
                    tokens.append(nxt)
                    if step == DECODE_STEPS:
                        break
                    out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                    past = out.past_key_values
                    logits = out.logits[0, -1]
            records.append({"text": text, "prompt_ids": ids, "tokens": tokens, "rows": rows})

        golden = {
            "generator": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                         f"{type(model).__name__} float32 eager attention",
            "checkpoint": checkpoint_record(args, f"{d}/model.safetensors"),
            "probe_ids": probe_ids,
            "prompts": records,
        }
    with open(args.out, "w") as f:
        json.dump(golden, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
