#!/usr/bin/env python3
"""One-off generator of testdata/goldens/qwen3_moe_llamacpp.json: llama.cpp's greedy continuations, and the hash of
every step's logits, on the random Qwen3-MoE GGUF files that `tracelm make-checkpoint --geometry G --format gguf
--dtype T --seed 7` writes (moe-tiny with Q8_0 and Q4_0 weights, moe-small with Q4_K and Q6_K; the router f32 as
llama.cpp's converter keeps it). Not run in CI; needs
the llama-cpp-python 0.3.36 venv that scripts/make_llamacpp_goldens.py describes and a built tracelm.

  /tmp/llamavenv/bin/python scripts/make_moe_llamacpp_goldens.py [--tracelm build/tracelm]

Llama(n_ctx=512, n_batch=n_ubatch=512, 1 thread, seed 1234, logits_all=False) with weight repacking off
(use_extra_bufts = False: on AVX2 llama.cpp would move Q4_0 experts into its interleaved layout, whose order tracelm
does not reproduce; see docs/ggml-numerics.md); each prompt in one llm.eval, then one token per eval, the argmax
(lowest id on ties) of the last token's logits each time. Each file's record holds the GGUF's FNV-1a 64 (so a test
knows it regenerated the same bytes) and, per prompt, as gemma3_greedy_norepack.json: prompt, prompt_ids, tokens,
top2_margin, logits_fnv1a64.
"""
import argparse
import json
import os
import subprocess
import tempfile

import llama_cpp
import numpy as np
from llama_cpp import Llama

from make_gemma3_norepack_goldens import fnv1a64, fnv1a64_f32, last_logits, no_repack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA_CPP_PYTHON = "0.3.36"
LLAMA_CPP_COMMIT = "ggml-org/llama.cpp@0c1e57098"
# (geometry, dtype): the K types need moe-small's widths of 256; in its 326-token prompt some experts have 8 rows or
# more (ggml's tiled order) and others fewer.
FILES = [("moe-tiny", "q8_0"), ("moe-tiny", "q4_0"), ("moe-small", "q4_k"), ("moe-small", "q6_k")]
SEED = 7
STEPS = 24
N_CTX = 512
PROMPTS = [
    "Hi",
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about experts who each know one thing.<|im_end|>\n<|im_start|>assistant\n",
    " ".join(f"Item {i}: the router picks {i % 8} and {(3 * i) % 8}." for i in range(24)),
]


def greedy(llm, prompt):
    prompt_ids = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
    llm.reset()
    llm.eval(prompt_ids)
    tokens, margins, hashes = [], [], []
    for step in range(STEPS):
        logits = last_logits(llm)
        hashes.append(fnv1a64_f32(logits))
        order = np.argsort(-logits.astype(np.float64), kind="stable")
        tokens.append(int(order[0]))
        margins.append(round(float(logits[order[0]]) - float(logits[order[1]]), 6))
        if step + 1 < STEPS:
            llm.eval([tokens[-1]])
    print(f"  {len(prompt_ids)} prompt ids: {tokens[:8]}... smallest margin {min(margins)}")
    return {"prompt": prompt, "prompt_ids": prompt_ids, "tokens": tokens, "top2_margin": margins,
            "logits_fnv1a64": hashes}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tracelm", default=os.path.join(ROOT, "build/tracelm"))
    ap.add_argument("--out", default=os.path.join(ROOT, "testdata/goldens/qwen3_moe_llamacpp.json"))
    args = ap.parse_args()
    if llama_cpp.__version__ != LLAMA_CPP_PYTHON:
        raise SystemExit(f"llama-cpp-python {llama_cpp.__version__}; these goldens pin {LLAMA_CPP_PYTHON}")
    no_repack()
    files = []
    with tempfile.TemporaryDirectory() as tmp:
        for geometry, dtype in FILES:
            path = os.path.join(tmp, f"{geometry}-{dtype}.gguf")
            subprocess.run([args.tracelm, "make-checkpoint", "--geometry", geometry, "--format", "gguf", "--dtype",
                            dtype, "--seed", str(SEED), "--out", path], check=True)
            with open(path, "rb") as f:
                digest = f"{fnv1a64(f.read()):016x}"
            print(f"{dtype}: {path} (fnv1a64 {digest})")
            llm = Llama(model_path=path, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=1, n_threads_batch=1,
                        seed=1234, logits_all=False, verbose=False)
            files.append({"geometry": geometry, "dtype": dtype, "gguf_fnv1a64": digest,
                          "records": [greedy(llm, p) for p in PROMPTS]})
            cp = llm.context_params
            del llm
    with open(args.out, "w") as f:
        json.dump({
            "generator": "scripts/make_moe_llamacpp_goldens.py",
            "llama_cpp_python": llama_cpp.__version__,
            "llama_cpp_commit": LLAMA_CPP_COMMIT,
            "system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "checkpoint": {"format": "gguf", "seed": SEED},
            "use_extra_bufts": False,
            "n_ctx": cp.n_ctx,
            "n_batch": cp.n_batch,
            "n_ubatch": cp.n_ubatch,
            "flash_attn": "disabled" if int(cp.flash_attn_type) == 0 else str(int(cp.flash_attn_type)),
            "kv_type": "f16",
            "threads": 1,
            "sampling": "argmax of the logits (lowest id on ties); no stop on end-of-generation",
            "logits_hash": "logits_fnv1a64: FNV-1a 64 of the last token's logits as little-endian f32 bytes, per step",
            "files": files,
        }, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
