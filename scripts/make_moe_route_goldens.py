#!/usr/bin/env python3
"""Writes testdata/ops/moe_route_grouped.json: DeepSeek's noaux_tc routing (moe_route_grouped, ops/moe/moe.h) as
scripts/deepseek_reference.py's `route` computes it (float64), on seeded random router inputs, for
tests/ops/test_moe.cpp. The goldens of testdata/models/tiny-deepseek-v32 hold layer 1's routes but not its input
rows, so the cases carry their inputs:
  - "tiny-layer1": the tiny checkpoint's layer-1 router and e_score_correction_bias (f32) with random rows;
  - "wide": 64 experts in 8 groups keeping 3, k 6, normalised, scaled by 2.5 (random router and bias);
  - "unnormalized": 16 experts in 4 groups keeping 2, k 3, not normalised, scaling 1.
Every value is an f32 (the inputs are rounded to f32 before the float64 reference sees them), and every row's
top-k and group boundaries are at least 1e-4 apart, so an f32 computation must pick the same experts.

  python3 scripts/make_moe_route_goldens.py [--out testdata/ops/moe_route_grouped.json]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepseek_reference import DeepseekV32  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "model.layers.1.mlp."


def read_f32_tensors(path, names):
    """The named F32 tensors of a safetensors file (read by hand: the safetensors package is not needed)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name in names:
        h = header[name]
        if h["dtype"] != "F32":
            sys.exit(f"{name}: {h['dtype']}, expected F32")
        b, e = h["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(h["shape"]).astype(np.float64)
    return out


def f32(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def router_model(cfg, router, bias):
    m = DeepseekV32.__new__(DeepseekV32)  # only route() is used: no checkpoint to load
    m.cfg = cfg
    m.w = {PREFIX + "gate.weight": router, PREFIX + "gate.e_score_correction_bias": bias}
    return m


def margin(cfg, router, bias, x):
    """The smallest gap at a boundary the routing decides: between the kept and the first dropped group, and between
    the k-th and the next expert among the kept groups."""
    E, G, TG, K = cfg["n_routed_experts"], cfg["n_group"], cfg["topk_group"], cfg["num_experts_per_tok"]
    per = E // G
    c = 1.0 / (1.0 + np.exp(-(x @ router.T))) + bias
    gaps = []
    for row in c:
        gs = sorted((sum(sorted(row[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(G)), reverse=True)
        if TG < G:
            gs_gap = gs[TG - 1] - gs[TG]
            gaps.append(gs_gap)
        groups = sorted(range(G), key=lambda g: -sum(sorted(row[g * per:(g + 1) * per], reverse=True)[:2]))[:TG]
        kept = sorted((row[e] for e in range(E) if e // per in groups), reverse=True)
        if K < len(kept):
            gaps.append(kept[K - 1] - kept[K])
    return min(gaps)


def case(name, cfg, router, bias, x):
    m = router_model(cfg, router, bias)
    gap = margin(cfg, router, bias, x)
    if gap < 1e-4:
        sys.exit(f"{name}: a boundary gap of {gap}: choose another seed")
    routes = m.route(1, x)
    return {"name": name, "experts": cfg["n_routed_experts"], "n_group": cfg["n_group"],
            "topk_group": cfg["topk_group"], "k": cfg["num_experts_per_tok"],
            "normalize": cfg["norm_topk_prob"], "scaling": cfg["routed_scaling_factor"],
            "hidden": x.shape[1], "rows": x.shape[0], "min_boundary_gap": gap,
            "x": x.ravel().tolist(), "router": router.ravel().tolist(), "bias": bias.ravel().tolist(),
            "ids": [list(map(int, e)) for e, _ in routes], "weights": [w.tolist() for _, w in routes]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "testdata", "ops", "moe_route_grouped.json"))
    args = ap.parse_args()
    rng = np.random.default_rng(20261205)
    tiny_dir = os.path.join(REPO, "testdata", "models", "tiny-deepseek-v32")
    with open(os.path.join(tiny_dir, "config.json")) as f:
        tiny_cfg = json.load(f)
    w = read_f32_tensors(os.path.join(tiny_dir, "model.safetensors"),
                         [PREFIX + "gate.weight", PREFIX + "gate.e_score_correction_bias"])
    router, bias = f32(w[PREFIX + "gate.weight"]), f32(w[PREFIX + "gate.e_score_correction_bias"])
    cases = [case("tiny-layer1", tiny_cfg, router, bias, f32(rng.normal(size=(8, router.shape[1]))))]
    wide = {"n_routed_experts": 64, "n_group": 8, "topk_group": 3, "num_experts_per_tok": 6, "norm_topk_prob": True,
            "routed_scaling_factor": 2.5}
    cases.append(case("wide", wide, f32(rng.normal(scale=0.3, size=(64, 32))), f32(rng.normal(scale=0.1, size=64)),
                      f32(rng.normal(size=(6, 32)))))
    small = {"n_routed_experts": 16, "n_group": 4, "topk_group": 2, "num_experts_per_tok": 3,
             "norm_topk_prob": False, "routed_scaling_factor": 1.0}
    cases.append(case("unnormalized", small, f32(rng.normal(scale=0.5, size=(16, 24))),
                      f32(rng.normal(scale=0.2, size=16)), f32(rng.normal(size=(5, 24)))))
    out = {"generator": "scripts/make_moe_route_goldens.py (DeepseekV32.route of scripts/deepseek_reference.py, "
                        "float64, on seeded f32 inputs; numpy seed 20261205)", "cases": cases}
    with open(args.out, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
