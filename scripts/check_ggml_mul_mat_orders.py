#!/usr/bin/env python3
"""One-off: which of llama.cpp's MUL_MATs in a dump of scripts/dump_llamacpp_tensors.py sum differently from ggml's
vec_dot (not run in CI; the llama-cpp-python 0.3.36 venv).

  /tmp/llamavenv/bin/python scripts/check_ggml_mul_mat_orders.py --dump /tmp/gemma_dump \
      --model ~/.cache/tracelm/models/gemma-3-270m-q4_k_m.gguf [--layers 0,1,17]

For every MUL_MAT node of eval0 whose weight is a GGUF tensor, it recomputes the product from the node's captured
input with ggml's own code through ctypes: the whole product as one-node graph (ggml_mul_mat, ggml-cpu on 1 thread,
so ggml picks its kernel by the product's rows as the forward did), and every row alone (a product of one row:
ggml_vec_dot). It prints how many outputs of each differ from the captured output: the first is 0 when the dump is
reproduced, the second counts where the batch's kernel sums in another order than vec_dot (Gemma 3 270M Q4_K_M with
repacking off and a 10-token prompt: Q4_K and Q6_K, ggml-cpu/tiled from 8 rows; the Q5_0 and Q8_0 products, which
llamafile's tinyBLAS computes, equal vec_dot's).
"""
import argparse
import ctypes
import json
import os

import gguf
import llama_cpp
import numpy as np

LIB = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
BASE = ctypes.CDLL(os.path.join(LIB, "libggml-base.so"), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
CPU = ctypes.CDLL(os.path.join(LIB, "libggml-cpu.so"), mode=os.RTLD_GLOBAL | os.RTLD_NOW)


class InitParams(ctypes.Structure):  # struct ggml_init_params (ggml.h)
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def setup():
    CPU.ggml_cpu_init()
    for name, res, args in [
        ("ggml_init", ctypes.c_void_p, [InitParams]),
        ("ggml_free", None, [ctypes.c_void_p]),
        ("ggml_new_tensor_2d", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]),
        ("ggml_mul_mat", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]),
        ("ggml_new_graph", ctypes.c_void_p, [ctypes.c_void_p]),
        ("ggml_build_forward_expand", None, [ctypes.c_void_p, ctypes.c_void_p]),
        ("ggml_get_data", ctypes.c_void_p, [ctypes.c_void_p]),
        ("ggml_nbytes", ctypes.c_size_t, [ctypes.c_void_p]),
    ]:
        getattr(BASE, name).restype = res
        getattr(BASE, name).argtypes = args
    CPU.ggml_graph_compute_with_ctx.restype = ctypes.c_int
    CPU.ggml_graph_compute_with_ctx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]


def mul_mat(wtype, wbytes, n, k, x):
    """ggml_mul_mat(w, x) as a one-node graph on 1 thread: y [T, n]."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    t = x.shape[0]
    ctx = BASE.ggml_init(InitParams(len(wbytes) + x.nbytes + t * n * 4 + (16 << 20), None, False))
    try:
        w = BASE.ggml_new_tensor_2d(ctx, wtype, k, n)
        assert BASE.ggml_nbytes(w) == len(wbytes)
        ctypes.memmove(BASE.ggml_get_data(w), wbytes, len(wbytes))
        b = BASE.ggml_new_tensor_2d(ctx, 0, k, t)
        ctypes.memmove(BASE.ggml_get_data(b), x.ctypes.data, x.nbytes)
        y = BASE.ggml_mul_mat(ctx, w, b)
        graph = BASE.ggml_new_graph(ctx)
        BASE.ggml_build_forward_expand(graph, y)
        assert CPU.ggml_graph_compute_with_ctx(ctx, graph, 1) == 0
        return np.frombuffer(ctypes.string_at(BASE.ggml_get_data(y), t * n * 4), dtype=np.float32).reshape(t, n).copy()
    finally:
        BASE.ggml_free(ctx)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default="/tmp/gemma_dump")
    ap.add_argument("--model", required=True)
    ap.add_argument("--layers", default="0,1,2,17", help="comma-separated layers, or 'all'")
    args = ap.parse_args()
    setup()
    meta = json.load(open(os.path.join(args.dump, "eval0.json")))
    arrays = np.load(os.path.join(args.dump, "eval0.npz"))
    weights = {t.name: t for t in gguf.GGUFReader(args.model).tensors}
    for rec in meta["nodes"]:
        if rec["op"] != "MUL_MAT" or rec["srcs"][0]["name"] not in weights:
            continue
        src = rec["srcs"][0]
        layer = src["name"].split(".")[1] if src["name"].startswith("blk.") else "head"
        if args.layers != "all" and layer != "head" and layer not in args.layers.split(","):
            continue
        t = weights[src["name"]]
        k, n = src["ne"][0], src["ne"][1]
        wbytes = np.array(t.data).tobytes()
        x = arrays[str(rec["srcs"][1]["node"])].reshape(-1, k)
        want = arrays[str(rec["index"])].reshape(-1, n)
        whole = mul_mat(int(t.tensor_type), wbytes, n, k, x)
        rows = np.concatenate([mul_mat(int(t.tensor_type), wbytes, n, k, x[i:i + 1]) for i in range(x.shape[0])])
        diff = lambda a: int((a.view(np.uint32) != want.view(np.uint32)).sum())
        print(f"{rec['name']:14s} {src['name']:28s} {src['type']:5s} T={x.shape[0]:4d}  graph vs dump {diff(whole):7d}"
              f"  vec_dot vs dump {diff(rows):7d} of {want.size}")


if __name__ == "__main__":
    main()
