#!/usr/bin/env python3
"""Writes a small random DeepSeek-V3.2 checkpoint in Hugging Face's layout (config.json + model.safetensors).

Seeded and deterministic (numpy's PCG64 from --seed; tensors drawn in the sorted order of their names), f32 or bf16.
The config carries model_type "deepseek_v32" and architectures ["DeepseekV32ForCausalLM"], as DeepSeek-V3.2's own
config.json does, and the tensor names are the real checkpoint's:

  model.embed_tokens.weight                                   [vocab, hidden]
  model.layers.{i}.input_layernorm.weight                     [hidden]
  model.layers.{i}.self_attn.q_a_proj.weight                  [q_lora_rank, hidden]
  model.layers.{i}.self_attn.q_a_layernorm.weight             [q_lora_rank]
  model.layers.{i}.self_attn.q_b_proj.weight                  [heads * (qk_nope + qk_rope), q_lora_rank]
  model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight        [kv_lora_rank + qk_rope, hidden]
  model.layers.{i}.self_attn.kv_a_layernorm.weight            [kv_lora_rank]
  model.layers.{i}.self_attn.kv_b_proj.weight                 [heads * (qk_nope + v_head), kv_lora_rank]
  model.layers.{i}.self_attn.o_proj.weight                    [hidden, heads * v_head]
  model.layers.{i}.self_attn.indexer.wq_b.weight              [index_heads * index_dim, q_lora_rank]
  model.layers.{i}.self_attn.indexer.wk.weight                [index_dim, hidden]
  model.layers.{i}.self_attn.indexer.k_norm.weight / .bias    [index_dim]   (a LayerNorm, with bias)
  model.layers.{i}.self_attn.indexer.weights_proj.weight      [index_heads, hidden]
  model.layers.{i}.post_attention_layernorm.weight            [hidden]
  dense layers (i < first_k_dense_replace): model.layers.{i}.mlp.{gate,up,down}_proj.weight (intermediate_size)
  MoE layers: model.layers.{i}.mlp.gate.weight [experts, hidden], mlp.gate.e_score_correction_bias [experts] (f32),
              mlp.experts.{e}.{gate,up,down}_proj.weight (moe_intermediate_size),
              mlp.shared_experts.{gate,up,down}_proj.weight (moe_intermediate_size * n_shared_experts)
  model.norm.weight [hidden], lm_head.weight [vocab, hidden]

Geometries:
  tiny                  hidden 64, 3 layers (the first dense), 4 heads, 8 routed experts in 4 groups, index_topk 8
                        (so that sparse attention differs from dense past 8 tokens), YaRN rope_scaling as V3.2's.
  v32-attention-slice   V3.2's exact attention and indexer shapes (hidden 7168, 128 heads, q_lora_rank 1536,
                        kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128, 64 indexer heads of 128, index_topk
                        2048), 2 layers (the first dense, intermediate 2048), 8 routed experts of width 256 in 4 groups,
                        vocab 4096. `--describe` prints its size: 554.5 M parameters, 1058 MiB in bf16 (767 MiB
                        of it attention + indexer); written only when asked (--out).

  python3 scripts/make_deepseek_checkpoint.py --geometry tiny --out testdata/models/tiny-deepseek-v32
  python3 scripts/make_deepseek_checkpoint.py --geometry v32-attention-slice --describe

Real config values from DeepSeek-V3.2's config.json (hidden_size 7168, num_attention_heads 128, q_lora_rank 1536,
kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, index_n_heads 64, index_head_dim 128,
index_topk 2048, n_group 8, topk_group 4, routed_scaling_factor 2.5, rope_scaling yarn factor 40) and
inference/config_671B_v3.2.json of deepseek-ai/DeepSeek-V3.2-Exp.
"""
import argparse
import json
import os
import struct

import numpy as np

YARN = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096, "type": "yarn"}

# Keys and defaults of DeepSeek-V3.2's config.json; each geometry overrides the sizes.
BASE = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v32",
    "moe_layer_freq": 1,
    "norm_topk_prob": True,
    "num_nextn_predict_layers": 0,  # the real model has 1 (an MTP layer the inference code skips); none here
    "rms_norm_eps": 1e-06,
    "rope_scaling": YARN,
    "rope_theta": 10000,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_method": "noaux_tc",
    "torch_dtype": "float32",
    "use_cache": True,
}

GEOMETRIES = {
    "tiny": dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                 num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4,
                 q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                 index_n_heads=4, index_head_dim=32, index_topk=8, n_routed_experts=8, n_shared_experts=1,
                 num_experts_per_tok=2, n_group=4, topk_group=2, routed_scaling_factor=2.5),
    "v32-attention-slice": dict(vocab_size=4096, hidden_size=7168, intermediate_size=2048, moe_intermediate_size=256,
                                num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=128,
                                num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                                qk_rope_head_dim=64, v_head_dim=128, index_n_heads=64, index_head_dim=128,
                                index_topk=2048, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                                n_group=4, topk_group=2, routed_scaling_factor=2.5),
}


def config_for(geometry):
    c = dict(BASE)
    c.update(GEOMETRIES[geometry])
    return dict(sorted(c.items()))


def tensor_shapes(c):
    """name -> (shape, kind) where kind picks the initialisation: 'w' (linear, std 1/sqrt(fan_in)), 'norm', 'bias',
    'embed', 'ebias' (the routing correction bias, f32 in the real checkpoint)."""
    H, D = c["num_attention_heads"], c["hidden_size"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    ql, kl = c["q_lora_rank"], c["kv_lora_rank"]
    ih, idim = c["index_n_heads"], c["index_head_dim"]
    s = {"model.embed_tokens.weight": ((c["vocab_size"], D), "embed"),
         "model.norm.weight": ((D,), "norm"),
         "lm_head.weight": ((c["vocab_size"], D), "w")}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        s.update({
            p + "input_layernorm.weight": ((D,), "norm"),
            p + "post_attention_layernorm.weight": ((D,), "norm"),
            a + "q_a_proj.weight": ((ql, D), "w"),
            a + "q_a_layernorm.weight": ((ql,), "norm"),
            a + "q_b_proj.weight": ((H * (nope + rope), ql), "w"),
            a + "kv_a_proj_with_mqa.weight": ((kl + rope, D), "w"),
            a + "kv_a_layernorm.weight": ((kl,), "norm"),
            a + "kv_b_proj.weight": ((H * (nope + vd), kl), "w"),
            a + "o_proj.weight": ((D, H * vd), "w"),
            a + "indexer.wq_b.weight": ((ih * idim, ql), "w"),
            a + "indexer.wk.weight": ((idim, D), "w"),
            a + "indexer.k_norm.weight": ((idim,), "norm"),
            a + "indexer.k_norm.bias": ((idim,), "bias"),
            a + "indexer.weights_proj.weight": ((ih, D), "w"),
        })
        m = p + "mlp."
        if i < c["first_k_dense_replace"] or i % c.get("moe_layer_freq", 1) != 0:
            I = c["intermediate_size"]
            s.update({m + "gate_proj.weight": ((I, D), "w"), m + "up_proj.weight": ((I, D), "w"),
                      m + "down_proj.weight": ((D, I), "w")})
        else:
            E, I = c["n_routed_experts"], c["moe_intermediate_size"]
            s.update({m + "gate.weight": ((E, D), "w"), m + "gate.e_score_correction_bias": ((E,), "ebias")})
            for e in range(E):
                q = f"{m}experts.{e}."
                s.update({q + "gate_proj.weight": ((I, D), "w"), q + "up_proj.weight": ((I, D), "w"),
                          q + "down_proj.weight": ((D, I), "w")})
            Is = I * c["n_shared_experts"]
            q = m + "shared_experts."
            s.update({q + "gate_proj.weight": ((Is, D), "w"), q + "up_proj.weight": ((Is, D), "w"),
                      q + "down_proj.weight": ((D, Is), "w")})
    return s


def draw(rng, shape, kind):
    if kind == "w":
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / np.sqrt(shape[1]))
    if kind == "embed":
        return rng.standard_normal(shape, dtype=np.float32)
    if kind == "norm":
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if kind == "bias":
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if kind == "ebias":
        # Small enough that sigmoid(logit) + bias stays positive, so that a router filling the groups it drops with
        # 0.0 instead of -inf (earlier transformers releases) still selects the same experts.
        return (0.05 * rng.standard_normal(shape)).astype(np.float32)
    raise ValueError(kind)


def to_bf16_bits(a):
    """Round f32 to bf16 (round to nearest even), as uint16 bit patterns."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, dtype):
    """A plain safetensors writer (the format: u64 header length, JSON header, data), so that bf16 needs no torch."""
    header, blobs, off = {}, [], 0
    for name, (arr, keep_f32) in tensors.items():
        if dtype == "bf16" and not keep_f32:
            data, st = to_bf16_bits(arr).tobytes(), "BF16"
        else:
            data, st = np.ascontiguousarray(arr, dtype="<f4").tobytes(), "F32"
        header[name] = {"dtype": st, "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def describe(c, shapes):
    n = sum(int(np.prod(sh)) for sh, _ in shapes.values())
    attn = sum(int(np.prod(sh)) for k, (sh, _) in shapes.items() if ".self_attn." in k)
    mb = lambda params, b: params * b / 2**20
    return {"params": n, "bf16_MiB": round(mb(n, 2), 1), "f32_MiB": round(mb(n, 4), 1),
            "attention_params": attn, "attention_bf16_MiB": round(mb(attn, 2), 1),
            "layers": c["num_hidden_layers"], "tensors": len(shapes)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", choices=sorted(GEOMETRIES), default="tiny")
    ap.add_argument("--out", help="output folder")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--describe", action="store_true", help="print the geometry's size and write nothing")
    args = ap.parse_args()
    c = config_for(args.geometry)
    shapes = tensor_shapes(c)
    if args.describe or not args.out:
        print(json.dumps({"geometry": args.geometry, **describe(c, shapes)}, indent=1))
        return
    c["torch_dtype"] = "bfloat16" if args.dtype == "bf16" else "float32"
    rng = np.random.Generator(np.random.PCG64(args.seed))
    tensors = {}
    for name in sorted(shapes):
        sh, kind = shapes[name]
        tensors[name] = (draw(rng, sh, kind), kind == "ebias")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors, args.dtype)
    print(json.dumps({"geometry": args.geometry, "out": args.out, "dtype": args.dtype, **describe(c, shapes)}))


if __name__ == "__main__":
    main()
