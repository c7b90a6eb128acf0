#!/usr/bin/env python3
"""One-off generator of the embedding goldens for tests/serve/test_embeddings.cpp (not run in CI).

An independent Qwen3 forward in numpy (float64), written from the Hugging Face modeling code's definition, reads the
random-weight checkpoint that `tracelm make-checkpoint --geometry tiny --seed 1 --dtype f32` writes (the one of
testdata/goldens/qwen3_tiny_f32.json) and gives, for each of that file's prompts (its token ids, from Hugging Face's
tokenizer), the final hidden state of the last token after the model's final norm, L2-normalised: the embedding of
last-token pooling, as Qwen3-Embedding computes it. Before writing, the forward's logits are checked against
transformers' logits in qwen3_tiny_f32.json, so this forward is the one transformers computes. Needs numpy only:

  python3 -m venv /tmp/e && /tmp/e/bin/pip install numpy
  /tmp/e/bin/python scripts/make_embedding_goldens.py --tracelm build/tracelm --out testdata/goldens/qwen3_tiny_embeddings.json
"""
import argparse
import json
import os
import struct
import subprocess
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, theta):
    """Hugging Face's rotate_half form over [heads, T, head_dim]."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(x.shape[1], dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + rot * sin


def forward(w, c, ids):
    """Returns (final-norm hidden states [T, hidden], logits [T, vocab])."""
    eps, H, KV = c["rms_norm_eps"], c["num_attention_heads"], c["num_key_value_heads"]
    D = c.get("head_dim") or c["hidden_size"] // H
    T = len(ids)
    x = w["model.embed_tokens.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, D).transpose(1, 0, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, D).transpose(1, 0, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, D).transpose(1, 0, 2)
        q = rope(rms_norm(q, w[p + "self_attn.q_norm.weight"], eps), c["rope_theta"])
        k = rope(rms_norm(k, w[p + "self_attn.k_norm.weight"], eps), c["rope_theta"])
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(D) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        x = x + a.transpose(1, 0, 2).reshape(T, H * D) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    hidden = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return hidden, hidden @ head.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tracelm", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(os.path.join(ROOT, "testdata/goldens/qwen3_tiny_f32.json")) as f:
        logit_goldens = json.load(f)
    ck = logit_goldens["checkpoint"]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([args.tracelm, "make-checkpoint", "--geometry", ck["geometry"], "--seed", str(ck["seed"]),
                        "--dtype", ck["dtype"], "--out", d], check=True)
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
        weights = read_safetensors(os.path.join(d, "model.safetensors"))
    records = []
    for p in logit_goldens["prompts"]:
        hidden, logits = forward(weights, config, p["prompt_ids"])
        want = np.array(p["rows"][0]["probe"])
        got = logits[-1][logit_goldens["probe_ids"]]
        err = np.max(np.abs(got - want))
        assert err < 1e-3, f"{p['text']!r}: logits differ from transformers' by {err}"
        e = hidden[-1] / np.linalg.norm(hidden[-1])
        records.append({"text": p["text"], "prompt_ids": p["prompt_ids"], "embedding": [float(v) for v in e]})
        print(f"{p['text']!r}: logits within {err:.2e} of transformers'")
    golden = {
        "generator": f"scripts/make_embedding_goldens.py: numpy {np.__version__} float64 Qwen3 forward, checked "
                     "against transformers' logits (qwen3_tiny_f32.json); last-token pooling after the final norm, "
                     "L2-normalised",
        "checkpoint": ck,
        "prompts": records,
    }
    with open(args.out, "w") as f:
        json.dump(golden, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
