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

With --emulate-repacked (a dump made with repacking on, llama.cpp's default), the Q4_K products whose weight sits in
the CPU_REPACK buffer are instead compared with a Python emulation of the q4_K_8x8 kernels' order (docs/ggml-numerics.md,
"Gemma 3 270M Q4_K_M"): the GEMM's per-sub-block-pair FMAs for the first T - T % 4 rows, the GEMV's per-block FMAs for
the rest, two accumulators, y = acc - accm; for the first --rows weight rows (the emulation is slow), in every eval.
FMAs are emulated in float64 (a product of two f32 is exact there; adding and rounding twice may, rarely, differ from
one fused rounding, so a stray mismatch here is not yet evidence).
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


class TypeTraitsCpu(ctypes.Structure):  # struct ggml_type_traits_cpu (ggml-cpu.h)
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int),
                ("nrows", ctypes.c_int64)]


def q8_k(x):
    """ggml's quantize_row_q8_K of one row: per 256-block d (f32), q (int), bsums (16 int)."""
    CPU.ggml_get_type_traits_cpu.restype = ctypes.POINTER(TypeTraitsCpu)
    CPU.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    from_float = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        CPU.ggml_get_type_traits_cpu(15).contents.from_float)
    x = np.ascontiguousarray(x, dtype=np.float32)
    buf = ctypes.create_string_buffer(x.size // 256 * 292)
    from_float(x.ctypes.data, buf, x.size)
    raw = np.frombuffer(buf.raw, np.uint8).reshape(-1, 292)
    return (raw[:, :4].copy().view(np.float32)[:, 0], raw[:, 4:260].copy().view(np.int8).astype(np.int64),
            raw[:, 260:292].copy().view(np.int16).astype(np.int64))


def q4_k_block(blk):
    """d, dmin, the 8 scales and mins, the 256 unsigned q of one block_q4_K (ggml's get_scale_min_k4)."""
    d = float(blk[0:2].copy().view(np.float16)[0])
    dmin = float(blk[2:4].copy().view(np.float16)[0])
    sc = blk[4:16].astype(np.int64)
    scales = [int(sc[j] & 63) if j < 4 else int((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4)) for j in range(8)]
    mins = [int(sc[j + 4] & 63) if j < 4 else int((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)) for j in range(8)]
    qs = blk[16:144].astype(np.int64)
    q = np.concatenate([np.concatenate([qs[32 * c:32 * c + 32] & 0xF, qs[32 * c:32 * c + 32] >> 4]) for c in range(4)])
    return np.float32(d), np.float32(dmin), scales, mins, q


def f32(v):
    return np.float32(v)


def fma(a, b, c):
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))


def emulate_repacked(raw_rows, x):
    """y [T, rows] of the q4_K_8x8 GEMM (first T - T % 4 rows) / GEMV (the rest) orders."""
    t_rows = x.shape[0]
    acts = [q8_k(x[j]) for j in range(t_rows)]
    y = np.zeros((t_rows, len(raw_rows)), dtype=np.float32)
    for n, raw in enumerate(raw_rows):
        blocks = [q4_k_block(raw[b * 144:(b + 1) * 144]) for b in range(len(raw) // 144)]
        for j in range(t_rows):
            ad, aq, bs = acts[j]
            acc = accm = f32(0)
            groups = [[0, 1], [2, 3], [4, 5], [6, 7]] if j < t_rows - t_rows % 4 else [list(range(8))]
            for b, (d, dmin, scales, mins, q) in enumerate(blocks):
                for g in groups:
                    s1 = sum(scales[s] * int((q[32 * s:32 * s + 32] * aq[b, 32 * s:32 * s + 32]).sum()) for s in g)
                    s2 = sum(mins[s] * int(bs[b, 2 * s] + bs[b, 2 * s + 1]) for s in g)
                    acc = fma(f32(s1), f32(d * ad[b]), acc)
                    accm = fma(f32(s2), f32(dmin * ad[b]), accm)
            y[j, n] = f32(acc - accm)
    return y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default="/tmp/gemma_dump")
    ap.add_argument("--model", required=True)
    ap.add_argument("--layers", default="0,1,2,17", help="comma-separated layers, or 'all'")
    ap.add_argument("--emulate-repacked", action="store_true")
    ap.add_argument("--rows", type=int, default=16, help="weight rows per product for --emulate-repacked")
    args = ap.parse_args()
    setup()
    if args.emulate_repacked:
        weights = {t.name: t for t in gguf.GGUFReader(args.model).tensors}
        for ev in sorted(f for f in os.listdir(args.dump) if f.startswith("eval") and f.endswith(".json")):
            meta = json.load(open(os.path.join(args.dump, ev)))
            arrays = np.load(os.path.join(args.dump, ev.replace(".json", ".npz")))
            for rec in meta["nodes"]:
                src = rec["srcs"][0] if rec["op"] == "MUL_MAT" else None
                if src is None or src["buffer"] != "CPU_REPACK" or src["type"] != "q4_K":
                    continue
                if args.layers != "all" and src["name"].split(".")[1] not in args.layers.split(","):
                    continue
                k, n = src["ne"][0], src["ne"][1]
                raw = np.array(weights[src["name"]].data).reshape(n, -1)[:args.rows]
                x = arrays[str(rec["srcs"][1]["node"])].reshape(-1, k)
                want = arrays[str(rec["index"])].reshape(-1, n)[:, :args.rows]
                got = emulate_repacked(raw, x)
                bad = int((got.view(np.uint32) != want.view(np.uint32)).sum())
                print(f"{ev[:-5]} {src['name']:28s} T={x.shape[0]:4d}  repacked-order emulation vs dump {bad} of "
                      f"{want.size}")
        return
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
