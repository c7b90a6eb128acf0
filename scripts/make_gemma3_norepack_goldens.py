#!/usr/bin/env python3
"""One-off generator of testdata/goldens/gemma3_greedy_norepack.json: llama.cpp's greedy continuations of the Gemma 3
270M Q4_K_M prompts of testdata/goldens/gemma3_greedy.json (scripts/make_llamacpp_goldens.py gemma3) with llama.cpp's
weight repacking off (not run in CI; needs the llama-cpp-python 0.3.36 venv that make_llamacpp_goldens.py describes).

  /tmp/llamavenv/bin/python scripts/make_gemma3_norepack_goldens.py [--prompts testdata/goldens/gemma3_greedy.json] \
      [--model ~/.cache/tracelm/models/gemma-3-270m-q4_k_m.gguf]

On an AVX2 machine llama.cpp repacks Q4_K weights into its interleaved q4_K_8x8 layout (ggml-cpu/repack.cpp) by
default, and its GEMV/GEMM over that layout sums in an order of its own; tracelm reproduces ggml's order for the
GGUF layout, which llama.cpp computes with llama_model_params.use_extra_bufts = False (its --no-repack). Everything
else is as make_llamacpp_goldens.py makes gemma3_greedy.json: Llama(n_ctx=2048, n_batch=n_ubatch=2048, 1 thread,
seed 1234, logits_all=False), each prompt (tokenized again here, and checked against the prompt file's ids) in one
llm.eval, then 31 evals of one token, the argmax (lowest id on ties) taken from the last token's logits each time.

Each record holds, as gemma3_greedy.json's: prompt, prompt_ids, tokens, top2_margin, eog_steps, text; and
logits_fnv1a64: per step, the 64-bit FNV-1a hash (hex) of the 262,144 logits' little-endian f32 bytes, so a test can
check every logit bit for bit; and differs_from_repacked: whether the tokens differ from the prompt file's (made with
repacking on). The top level records use_extra_bufts = false and logits_all = false besides the prompt file's
fields (the llama.cpp version and commit, context parameters, hyperparameters).
"""
import argparse
import hashlib
import json
import os

import llama_cpp
import llama_cpp.llama_cpp as lc
import numpy as np
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.expanduser("~/.cache/tracelm/models/gemma-3-270m-q4_k_m.gguf")
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
LLAMA_CPP_PYTHON = "0.3.36"
GREEDY_STEPS = 32
N_CTX = 2048
SEED = 1234
FNV_OFFSET, FNV_PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def fnv1a64(data):
    """FNV-1a over bytes, 64 bits, vectorized: the bytes are folded one at a time in order."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def fnv1a64_f32(values):
    raw = np.ascontiguousarray(values, dtype="<f4").tobytes()
    # Pure Python over 1 MB is slow but fine for 300 hashes; keep it obviously correct.
    return f"{fnv1a64(raw):016x}"


def no_repack():
    """use_extra_bufts = False in every llama_model_params llama-cpp-python makes from now on."""
    orig = lc.llama_model_default_params

    def patched():
        p = orig()
        p.use_extra_bufts = False
        return p

    lc.llama_model_default_params = patched
    llama_cpp.llama.llama_cpp.llama_model_default_params = patched


def last_logits(llm):
    ptr = lc.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32)


def greedy(llm, record):
    prompt_ids = llm.tokenize(record["prompt"].encode("utf-8"), add_bos=True, special=True)
    if prompt_ids != record["prompt_ids"]:
        raise SystemExit(f"{record['prompt'][:40]!r}: llama.cpp's ids differ from the prompt file's")
    vocab = lc.llama_model_get_vocab(llm.model)
    llm.reset()
    llm.eval(prompt_ids)
    tokens, margins, eog_steps, hashes = [], [], [], []
    for step in range(GREEDY_STEPS):
        logits = last_logits(llm)
        hashes.append(fnv1a64_f32(logits))
        order = np.argsort(-logits.astype(np.float64), kind="stable")  # the lowest id wins a tie, as in argmax
        tok = int(order[0])
        tokens.append(tok)
        margins.append(round(float(logits[order[0]]) - float(logits[order[1]]), 6))
        if lc.llama_vocab_is_eog(vocab, tok):
            eog_steps.append(step)
        if step + 1 < GREEDY_STEPS:
            llm.eval([tok])
    out = {
        "prompt": record["prompt"],
        "prompt_ids": prompt_ids,
        "tokens": tokens,
        "top2_margin": margins,
        "eog_steps": eog_steps,
        "text": llm.detokenize(tokens, special=True).decode("utf-8", errors="replace"),
        "logits_fnv1a64": hashes,
        "differs_from_repacked": tokens != record["tokens"],
    }
    print(f"{len(prompt_ids)} prompt ids: {out['text']!r} (differs from repacked: {out['differs_from_repacked']})")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", default=os.path.join(ROOT, "testdata/goldens/gemma3_greedy.json"))
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--out", default=os.path.join(ROOT, "testdata/goldens/gemma3_greedy_norepack.json"))
    args = ap.parse_args()
    if llama_cpp.__version__ != LLAMA_CPP_PYTHON:
        raise SystemExit(f"llama-cpp-python {llama_cpp.__version__}; these goldens pin {LLAMA_CPP_PYTHON}")
    with open(args.model, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if digest != GGUF_SHA256:
        raise SystemExit(f"{args.model}: sha256 {digest}, expected {GGUF_SHA256}")
    with open(args.prompts) as f:
        source = json.load(f)
    no_repack()
    llm = Llama(model_path=args.model, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=1, n_threads_batch=1,
                seed=SEED, logits_all=False, verbose=False)
    cp = llm.context_params
    golden = {k: v for k, v in source.items() if k != "records"}
    golden.update({
        "generator": "scripts/make_gemma3_norepack_goldens.py",
        "prompts_from": os.path.relpath(os.path.abspath(args.prompts), ROOT),
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "gguf_sha256": digest,
        "use_extra_bufts": False,
        "logits_all": False,
        "n_ctx": cp.n_ctx,
        "n_batch": cp.n_batch,
        "n_ubatch": cp.n_ubatch,
        "swa_full": bool(cp.swa_full),
        "flash_attn": "disabled" if int(cp.flash_attn_type) == 0 else str(int(cp.flash_attn_type)),
        "logits_hash": "logits_fnv1a64: FNV-1a 64 of the last token's logits as little-endian f32 bytes, per step",
        "records": [greedy(llm, r) for r in source["records"]],
    })
    with open(args.out, "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
