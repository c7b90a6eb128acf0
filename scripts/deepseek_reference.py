#!/usr/bin/env python3
"""An independent float64 NumPy reference of DeepSeek-V3.2 (MLA + lightning indexer + sparse attention + DeepSeek
MoE) for tracelm's tests. Reads a Hugging Face-layout folder (config.json + *.safetensors; f32/f16 through the
safetensors package's numpy API, bf16 widened by hand since numpy has no bf16). Written from the architecture's
description (DeepSeek-V3.2-Exp's inference/model.py and kernel.py, transformers' deepseek_v3 modeling) for the tests;
it shares no code with them. Every step recomputes the whole prefix (no cache): simple, and exactly what a cached
decode must equal, since every piece is causal per position.

Semantics (f64 throughout):
  h = embed[ids]
  per layer: a = rmsnorm(h) * input_layernorm
    MLA: qr = rmsnorm(a Wq_a^T) * q_a_layernorm; q = qr Wq_b^T -> [T, H, nope | rope]
         kv = a Wkv_a^T -> [c (kv_lora) | k_pe (rope)]; c = rmsnorm(c) * kv_a_layernorm
         q_pe, k_pe: INTERLEAVED RoPE (pairs (2i, 2i+1)), the main attention's layout in DeepSeek's code
         [k_nope | v] = c Wkv_b^T per head; score = (q_nope.k_nope + q_pe.k_pe) * scale
         scale = (nope + rope)^-0.5, times mscale^2 with mscale = 0.1 * mscale_all_dim * ln(factor) + 1 under YaRN
    indexer (sparse mode): qi = qr Wi_q^T -> [T, Hi, Di], ki = LayerNorm(a Wi_k^T; k_norm.weight, k_norm.bias, 1e-6)
         the FIRST qk_rope_head_dim dims of qi and ki get NON-INTERLEAVED (NeoX, rotate-half) RoPE with the same
         frequencies; then both are multiplied by the normalised Sylvester Hadamard matrix (H_Di / sqrt(Di));
         w = (a Wi_w^T) * Hi^-0.5 * Di^-0.5; I[t, s] = sum_h w[t, h] * relu(qi[t, h] . ki[s]), s <= t
         selection of row t: all s <= t if t + 1 <= index_topk, else the index_topk best by (score desc, s asc)
    attention: softmax over the causal keys (dense) or the selected keys (sparse); out = (P v) Wo^T
    h += out; b = rmsnorm(h) * post_attention_layernorm
    FFN: dense MLP (layer < first_k_dense_replace) down(silu(gate b) * up b), or MoE:
         s = sigmoid(b Wg^T); c = s + e_score_correction_bias (selection only)
         group score = sum of the top-2 c in each of n_group groups; keep the topk_group best groups (ties: lower
         index); top num_experts_per_tok experts by c within them (ties: lower index); weights = s[chosen],
         divided by their sum if norm_topk_prob, times routed_scaling_factor; plus the shared experts' MLP
    h += ffn
  logits = (rmsnorm(h) * norm) lm_head^T

Tie rule: DeepSeek's code selects with torch.topk (indexer) and torch.topk (router), whose order among equal values
is unspecified; this reference and tracelm's dsa_topk (docs/dsa.md) rank equal scores by the lower index.

  python3 scripts/deepseek_reference.py MODEL_DIR --prompt 1,2,3 --prompt 5,6 --steps 8 [--dense]
      [--probe 0,1,2] [--topk 5] [--full-logits] [--intermediates LAYER] [--out FILE.json] [--checkpoint JSON]

testdata/goldens/deepseek_v32_slice_bf16.json (tests/model/test_deepseek.cpp) was made by
  build/tracelm make-checkpoint --geometry deepseek-v32-slice --seed 1 --dtype bf16 --out /tmp/ds-slice
  python3 scripts/deepseek_reference.py /tmp/ds-slice --prompt 1 --prompt 17,400,2333,9,871,64,3000 \
      --prompt 5,4000,12,77,1024,2048,3071,300,45,600,7,3333,18,250,999,4095,1500,62,808,2 --steps 5 --topk 10 \
      --probe 0,1,2,100,4095 --checkpoint '{"geometry": "deepseek-v32-slice", "seed": 1, "dtype": "bf16"}' \
      --out testdata/goldens/deepseek_v32_slice_bf16.json
"""
import argparse
import glob
import hashlib
import json
import math
import os
import struct

import numpy as np


# ---------------------------------------------------------------------------------------------------------------
# loading

def load_tensors(folder):
    from safetensors.numpy import load_file
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        bf16 = {k: v for k, v in header.items() if k != "__metadata__" and v["dtype"] == "BF16"}
        if not bf16:
            out.update({k: v.astype(np.float64) for k, v in load_file(path).items()})
            continue
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        base = 8 + n
        for k, v in header.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            buf = raw[base + a: base + b]
            if v["dtype"] == "BF16":
                arr = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
            elif v["dtype"] == "F32":
                arr = buf.view("<f4")
            elif v["dtype"] == "F16":
                arr = buf.view("<f2")
            else:
                raise ValueError(f"{k}: dtype {v['dtype']} not handled")
            out[k] = arr.reshape(v["shape"]).astype(np.float64)
    return out


# ---------------------------------------------------------------------------------------------------------------
# pieces

def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layernorm(x, w, b, eps=1e-6):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def silu(x):
    return x / (1.0 + np.exp(-x))


def yarn_get_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_inv_freq(cfg):
    """Frequencies of the rope dims (qk_rope_head_dim / 2 pairs), YaRN-corrected if rope_scaling says so, and the
    factor on cos/sin (transformers' attention_factor; 1 for V3.2's mscale == mscale_all_dim)."""
    d = cfg["qk_rope_head_dim"]
    base = float(cfg.get("rope_theta", 10000.0))
    inv = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not rs or rs.get("type", rs.get("rope_type")) in (None, "default"):
        return inv, 1.0
    kind = rs.get("type", rs.get("rope_type"))
    if kind != "yarn":
        raise ValueError(f"rope_scaling {kind} not handled")
    factor = float(rs["factor"])
    orig = float(rs["original_max_position_embeddings"])
    bf, bs = float(rs.get("beta_fast", 32)), float(rs.get("beta_slow", 1))

    def corr_dim(rot):
        return d * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr_dim(bf)), 0)
    high = min(math.ceil(corr_dim(bs)), d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    smooth = 1.0 - ramp  # 1: keep the frequency (extrapolate), 0: divide it by factor (interpolate)
    inv = inv / factor * (1.0 - smooth) + inv * smooth
    m, mad = rs.get("mscale"), rs.get("mscale_all_dim")
    att = rs.get("attention_factor")
    if att is None:
        att = yarn_get_mscale(factor, m) / yarn_get_mscale(factor, mad) if (m and mad) else yarn_get_mscale(factor, 1.0)
    return inv, float(att)


def softmax_scale(cfg):
    s = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if rs and rs.get("type", rs.get("rope_type")) == "yarn":
        mad = rs.get("mscale_all_dim", 0)
        if mad:
            m = yarn_get_mscale(float(rs["factor"]), float(mad))
            s *= m * m
    return s


def rope_interleaved(x, pos, inv, att):
    """x [..., T, ..., d] with positions on axis 0: pairs (x[2i], x[2i+1]) rotated by pos * inv[i]."""
    ang = np.outer(pos, inv)  # [T, d/2]
    shape = (len(pos),) + (1,) * (x.ndim - 2) + (inv.size,)
    c, s = (np.cos(ang) * att).reshape(shape), (np.sin(ang) * att).reshape(shape)
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = a * c - b * s
    y[..., 1::2] = a * s + b * c
    return y


def rope_neox(x, pos, inv, att):
    """Non-interleaved: pairs (x[i], x[i + d/2])."""
    ang = np.outer(pos, inv)
    shape = (len(pos),) + (1,) * (x.ndim - 2) + (inv.size,)
    c, s = (np.cos(ang) * att).reshape(shape), (np.sin(ang) * att).reshape(shape)
    h = inv.size
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def hadamard(n):
    """Sylvester-ordered Hadamard matrix H_n / sqrt(n) (what fast_hadamard_transform computes with scale n^-0.5)."""
    if n & (n - 1):
        raise ValueError("Hadamard size must be a power of two")
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / math.sqrt(n)


def topk_lower_index(row, valid, k):
    """Positions 0..valid-1 of `row`: all of them in ascending order if valid <= k, else the k best by
    (score descending, position ascending), returned in ascending position order."""
    if valid <= k:
        return list(range(valid))
    order = sorted(range(valid), key=lambda s: (-row[s], s))
    return sorted(order[:k])


# ---------------------------------------------------------------------------------------------------------------
# model

class DeepseekV32:
    def __init__(self, folder):
        with open(os.path.join(folder, "config.json")) as f:
            self.cfg = json.load(f)
        self.w = load_tensors(folder)
        self.inv, self.att = rope_inv_freq(self.cfg)
        self.scale = softmax_scale(self.cfg)
        c = self.cfg
        self.has_indexer = "index_topk" in c and f"model.layers.0.self_attn.indexer.wk.weight" in self.w
        if self.has_indexer:
            self.hadamard = hadamard(c["index_head_dim"])

    def _w(self, name):
        return self.w[name]

    def indexer(self, p, a, qr, pos):
        c = self.cfg
        Hi, Di, R = c["index_n_heads"], c["index_head_dim"], c["qk_rope_head_dim"]
        T = a.shape[0]
        q = (qr @ self._w(p + "indexer.wq_b.weight").T).reshape(T, Hi, Di)
        k = layernorm(a @ self._w(p + "indexer.wk.weight").T, self._w(p + "indexer.k_norm.weight"),
                      self._w(p + "indexer.k_norm.bias"), 1e-6)
        q = np.concatenate([rope_neox(q[..., :R], pos, self.inv, self.att), q[..., R:]], axis=-1)
        k = np.concatenate([rope_neox(k[:, :R], pos, self.inv, self.att), k[:, R:]], axis=-1)
        q = q @ self.hadamard  # H is symmetric
        k = k @ self.hadamard
        wts = (a @ self._w(p + "indexer.weights_proj.weight").T) * Hi ** -0.5 * Di ** -0.5  # [T, Hi]
        dots = np.einsum("thd,sd->ths", q, k)
        scores = np.einsum("th,ths->ts", wts, np.maximum(dots, 0.0))
        sel = [topk_lower_index(scores[t], t + 1, c["index_topk"]) for t in range(T)]
        return scores, sel

    def mla(self, i, a, pos, dense, record):
        c = self.cfg
        p = f"model.layers.{i}.self_attn."
        H, nope, R, V, KL = (c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                             c["v_head_dim"], c["kv_lora_rank"])
        eps = c.get("rms_norm_eps", 1e-6)
        T = a.shape[0]
        if c.get("q_lora_rank"):
            qr = rmsnorm(a @ self._w(p + "q_a_proj.weight").T, self._w(p + "q_a_layernorm.weight"), eps)
            q = qr @ self._w(p + "q_b_proj.weight").T
        else:
            qr, q = None, a @ self._w(p + "q_proj.weight").T
        q = q.reshape(T, H, nope + R)
        q_nope, q_pe = q[..., :nope], rope_interleaved(q[..., nope:], pos, self.inv, self.att)
        kv = a @ self._w(p + "kv_a_proj_with_mqa.weight").T
        ckv = rmsnorm(kv[:, :KL], self._w(p + "kv_a_layernorm.weight"), eps)
        k_pe = rope_interleaved(kv[:, KL:], pos, self.inv, self.att)  # [T, R], shared by the heads
        kvb = (ckv @ self._w(p + "kv_b_proj.weight").T).reshape(T, H, nope + V)
        k_nope, v = kvb[..., :nope], kvb[..., nope:]
        s = (np.einsum("thd,shd->hts", q_nope, k_nope) + np.einsum("thr,sr->hts", q_pe, k_pe)) * self.scale
        allowed = np.tril(np.ones((T, T), dtype=bool))
        if not dense and self.has_indexer:
            scores, sel = self.indexer(p, a, qr, pos)
            m = np.zeros((T, T), dtype=bool)
            for t, ss in enumerate(sel):
                m[t, ss] = True
            allowed &= m
            if record is not None:
                record.update({"indexer_scores": [[float(x) for x in scores[t, :t + 1]] for t in range(T)],
                               "selected": sel})
        s = np.where(allowed[None], s, -np.inf)
        s = s - s.max(axis=-1, keepdims=True)
        e = np.exp(s)
        pr = e / e.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shv->thv", pr, v).reshape(T, H * V)
        return o @ self._w(p + "o_proj.weight").T

    def absorbed_decode_check(self, i, a, pos):
        """The last query of layer i computed in the latent space, as a cached decode step would ("absorbed": the
        cache holds c = kv_a_layernorm(...) [kv_lora_rank] and k_pe [qk_rope] per position, nothing per head):
          q_abs[h] = W_UK[h]^T q_nope[h]                 (W_UK[h] = rows h*(nope+v) .. +nope of kv_b_proj)
          score[h, s] = (q_abs[h] . c[s] + q_pe[h] . k_pe[s]) * scale
          o_lat[h] = sum_s p[h, s] c[s];  o[h] = W_UV[h] o_lat[h]   (W_UV[h] = the next v rows)
        Returns the largest absolute difference from the expanded (per-head K/V) form, dense causal."""
        c = self.cfg
        p = f"model.layers.{i}.self_attn."
        H, nope, R, V, KL = (c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                             c["v_head_dim"], c["kv_lora_rank"])
        eps = c.get("rms_norm_eps", 1e-6)
        qr = rmsnorm(a @ self._w(p + "q_a_proj.weight").T, self._w(p + "q_a_layernorm.weight"), eps)
        q = (qr[-1:] @ self._w(p + "q_b_proj.weight").T).reshape(1, H, nope + R)
        q_nope, q_pe = q[0, :, :nope], rope_interleaved(q[..., nope:], pos[-1:], self.inv, self.att)[0]
        kv = a @ self._w(p + "kv_a_proj_with_mqa.weight").T
        ckv = rmsnorm(kv[:, :KL], self._w(p + "kv_a_layernorm.weight"), eps)
        k_pe = rope_interleaved(kv[:, KL:], pos, self.inv, self.att)
        wkv = self._w(p + "kv_b_proj.weight").reshape(H, nope + V, KL)
        w_uk, w_uv = wkv[:, :nope], wkv[:, nope:]
        q_abs = np.einsum("hd,hdc->hc", q_nope, w_uk)
        s = (q_abs @ ckv.T + q_pe @ k_pe.T) * self.scale  # [H, T]
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        pr = e / e.sum(axis=-1, keepdims=True)
        o = np.einsum("hc,hvc->hv", pr @ ckv, w_uv).reshape(1, H * V) @ self._w(p + "o_proj.weight").T
        full = self.mla(i, a, pos, True, None)[-1:]
        return float(np.max(np.abs(o - full)))

    def mlp(self, prefix, x):
        g = x @ self._w(prefix + "gate_proj.weight").T
        u = x @ self._w(prefix + "up_proj.weight").T
        return (silu(g) * u) @ self._w(prefix + "down_proj.weight").T

    def route(self, i, x):
        """Per token: (experts, weights) as DeepSeek's noaux_tc router selects them."""
        c = self.cfg
        p = f"model.layers.{i}.mlp."
        E, K = c["n_routed_experts"], c["num_experts_per_tok"]
        G, TG = c.get("n_group", 1) or 1, c.get("topk_group", 1) or 1
        s = 1.0 / (1.0 + np.exp(-(x @ self._w(p + "gate.weight").T)))
        bias = self.w.get(p + "gate.e_score_correction_bias", np.zeros(E))
        out = []
        for t in range(x.shape[0]):
            ch = s[t] + bias
            allowed = list(range(E))
            if G > 1:
                per = E // G
                gs = [sum(sorted(ch[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(G)]
                groups = sorted(range(G), key=lambda g: (-gs[g], g))[:TG]
                allowed = [e for e in range(E) if e // per in groups]
            experts = sorted(allowed, key=lambda e: (-ch[e], e))[:K]
            wts = np.array([s[t, e] for e in experts])
            if c.get("norm_topk_prob", True):
                wts = wts / wts.sum()
            wts = wts * c.get("routed_scaling_factor", 1.0)
            out.append((experts, wts))
        return out

    def moe(self, i, x):
        p = f"model.layers.{i}.mlp."
        y = np.zeros_like(x)
        for t, (experts, wts) in enumerate(self.route(i, x)):
            for e, w in zip(experts, wts):
                y[t] += w * self.mlp(f"{p}experts.{e}.", x[t:t + 1])[0]
        if self.cfg.get("n_shared_experts"):
            y += self.mlp(p + "shared_experts.", x)
        return y

    def forward(self, ids, dense=False, record_layer=None, route_layer=None):
        c = self.cfg
        eps = c.get("rms_norm_eps", 1e-6)
        pos = np.arange(len(ids), dtype=np.float64)
        h = self._w("model.embed_tokens.weight")[np.asarray(ids)]
        record = None
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            a = rmsnorm(h, self._w(p + "input_layernorm.weight"), eps)
            rec = {} if record_layer == i else None
            h = h + self.mla(i, a, pos, dense, rec)
            if rec is not None:
                record = {**(record or {}), **rec}
            b = rmsnorm(h, self._w(p + "post_attention_layernorm.weight"), eps)
            moe = i >= c.get("first_k_dense_replace", 0) and i % c.get("moe_layer_freq", 1) == 0 \
                and c.get("n_routed_experts")
            if moe and route_layer == i:
                record = dict(record or {})
                record["routes"] = [{"experts": e, "weights": [float(x) for x in w]} for e, w in self.route(i, b)]
                record["route_layer"] = i
            h = h + (self.moe(i, b) if moe else self.mlp(p + "mlp.", b))
        h = rmsnorm(h, self._w("model.norm.weight"), eps)
        return h @ self._w("lm_head.weight").T, record


def self_check(m, ids):
    c = m.cfg
    eps = c.get("rms_norm_eps", 1e-6)
    pos = np.arange(len(ids), dtype=np.float64)
    h = m._w("model.embed_tokens.weight")[np.asarray(ids)]
    a = rmsnorm(h, m._w("model.layers.0.input_layernorm.weight"), eps)
    out = {"absorbed_vs_expanded_max_abs": m.absorbed_decode_check(0, a, pos)}
    # Load-time permutation for a NeoX-only engine: rows [0, 2, ..., d-2, 1, 3, ..., d-1] of the rope part. NeoX RoPE
    # of the permuted vector is the permuted interleaved RoPE, so q_pe . k_pe is unchanged.
    d = c["qk_rope_head_dim"]
    perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    x = np.random.default_rng(0).standard_normal((len(ids), 3, d))
    out["interleaved_rope_as_permuted_neox_max_abs"] = float(np.max(np.abs(
        rope_neox(x[..., perm], pos, m.inv, m.att) - rope_interleaved(x, pos, m.inv, m.att)[..., perm])))
    if m.has_indexer:
        p = "model.layers.0.self_attn."
        qr = rmsnorm(a @ m._w(p + "q_a_proj.weight").T, m._w(p + "q_a_layernorm.weight"), eps)
        with_h, _ = m.indexer(p, a, qr, pos)
        saved, m.hadamard = m.hadamard, np.eye(c["index_head_dim"])
        without_h, _ = m.indexer(p, a, qr, pos)
        m.hadamard = saved
        out["hadamard_score_max_abs_change"] = float(np.max(np.abs(with_h - without_h)))
        short = ids[:c["index_topk"]]
        ls, _ = m.forward(short, dense=False)
        ld, _ = m.forward(short, dense=True)
        out["sparse_equals_dense_within_topk"] = bool(np.array_equal(ls, ld))
        ls, _ = m.forward(ids, dense=False)
        ld, _ = m.forward(ids, dense=True)
        out["sparse_vs_dense_max_abs_full_prompt"] = float(np.max(np.abs(ls - ld)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--prompt", action="append", required=True, help="comma-separated token ids (repeatable)")
    ap.add_argument("--steps", type=int, default=8, help="greedy steps after each prompt")
    ap.add_argument("--dense", action="store_true", help="full causal attention instead of the indexer's top-k")
    ap.add_argument("--probe", default="0,1,2", help="token ids whose logits every step records")
    ap.add_argument("--topk", type=int, default=5)
    ap.add_argument("--full-logits", action="store_true", help="record every logit of every step")
    ap.add_argument("--intermediates", type=int, default=None, metavar="LAYER",
                    help="record this layer's indexer scores and selections for each prompt's prefill")
    ap.add_argument("--routes", type=int, default=None, metavar="LAYER",
                    help="record this MoE layer's experts and weights per token for each prompt's prefill")
    ap.add_argument("--out", help="write JSON here instead of stdout")
    ap.add_argument("--checkpoint", metavar="JSON",
                    help='how MODEL was made, e.g. \'{"geometry": "deepseek-v32-slice", "seed": 1, "dtype": "bf16"}\': '
                         "recorded with MODEL/model.safetensors' sha256, so a test can regenerate and check it")
    ap.add_argument("--self-check", action="store_true",
                    help="check identities on the first prompt and exit: absorbed == expanded MLA, the Hadamard "
                         "rotation leaves indexer scores unchanged, sparse == dense while the context <= index_topk")
    args = ap.parse_args()
    m = DeepseekV32(args.model)
    if args.self_check:
        print(json.dumps(self_check(m, [int(x) for x in args.prompt[0].split(",") if x])))
        return
    probes = [int(x) for x in args.probe.split(",") if x]
    result = {"model": os.path.abspath(args.model), "mode": "dense" if args.dense else "sparse",
              "index_topk": m.cfg.get("index_topk"), "softmax_scale": m.scale, "rope_inv_freq": m.inv.tolist(),
              "rope_attention_factor": m.att,
              # unscaled / scaled frequency of each rotated pair: the per-pair divisors of tracelm's RopeSpec
              "rope_pair_divisors": (rope_inv_freq({**m.cfg, "rope_scaling": None})[0] / m.inv).tolist(),
              "prompts": []}
    if args.checkpoint:
        with open(os.path.join(args.model, "model.safetensors"), "rb") as f:
            result["checkpoint"] = {**json.loads(args.checkpoint), "sha256": hashlib.file_digest(f, "sha256").hexdigest()}
    for ptxt in args.prompt:
        ids = [int(x) for x in ptxt.split(",") if x]
        seq, steps, inter = list(ids), [], None
        for step in range(args.steps):
            logits, rec = m.forward(seq, dense=args.dense,
                                    record_layer=args.intermediates if step == 0 else None,
                                    route_layer=args.routes if step == 0 else None)
            if step == 0:
                inter = rec
            last = logits[-1]
            order = sorted(range(last.size), key=lambda j: (-last[j], j))
            tok = order[0]
            st = {"position": len(seq) - 1, "token": tok, "probe": {str(j): float(last[j]) for j in probes},
                  "topk": [[j, float(last[j])] for j in order[:args.topk]]}
            if args.full_logits:
                st["logits"] = [float(x) for x in last]
            steps.append(st)
            seq.append(tok)
        entry = {"prompt": ids, "tokens": seq[len(ids):], "steps": steps}
        if inter is not None:
            entry["intermediates"] = {"layer": args.intermediates, **inter}
        result["prompts"].append(entry)
    text = json.dumps(result)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
