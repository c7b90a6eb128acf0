#!/usr/bin/env python3
"""One-off generator of ggml's quantized dot products, the oracle of tests/backends/test_quant.cpp's GgmlDot tests (not run
in CI). It calls ggml's own CPU kernels through ctypes, from the libraries llama-cpp-python ships:

  python -m venv /tmp/llamavenv
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" /tmp/llamavenv/bin/pip install \
      llama-cpp-python==0.3.36
  /tmp/llamavenv/bin/python scripts/make_ggml_dot_fixtures.py

so the numbers are those of an x86 AVX2 build of ggml-cpu (what llama.cpp runs on such a machine): for each weight
type, ggml_get_type_traits_cpu(type) gives vec_dot and vec_dot_type (Q8_0 for Q8_0/Q4_0/Q5_0, Q8_1 for
Q4_1/Q5_1, Q8_K for the K types), and that type's from_float quantizes the activations.

One file per type, testdata/quant/ggml_dot_<type>.bin (type in lower case), little-endian:
    magic       4 bytes  b"TLGD"
    version     u32      1
    ggml_type   u32      the weight type (GGMLQuantizationType value)
    act_type    u32      its vec_dot_type
    rows        u32      weight rows R
    acts        u32      activation rows A
    cols        u32      K, a multiple of 256
    weights     R * K / block_elems * block_bytes bytes: ggml_quantize_chunk (ggml's reference quantizer) of
                deterministic f32 rows
    x           A * K f32 activations
    act_blocks  A * K / act_block_elems * act_block_bytes bytes: from_float(x row) in ggml's layout
                (block_q8_0: f16 d, 32 x i8; block_q8_1: f16 d, f16 s, 32 x i8; block_q8_K: f32 d, 256 x i8,
                16 x i16 bsums)
    dots        A * R f32: vec_dot(K, weight row r, act row a) at dots[a * R + r], exact bits

And one file per type, testdata/quant/ggml_mul_mat_<type>.bin: ggml's MUL_MAT of the same weight rows by several of
the same activation rows at once, as llama.cpp computes a batch: a one-node graph ggml_mul_mat(w, x) computed by
ggml_graph_compute_with_ctx on 1 thread, so ggml-cpu picks its kernel by the product's rows as in llama.cpp's
forward (K types: vec_dot below 8 rows, its tiled kernel (ggml-cpu/tiled) from 8; Q8_0/Q4_0/Q5_0: llamafile's
tinyBLAS_Q0_AVX from 2 rows; Q4_1/Q5_1: vec_dot), little-endian:
    magic       4 bytes  b"TLGM"
    version     u32      1
    ggml_type   u32      the weight type
    rows        u32      R (the weight rows of ggml_dot_<type>.bin)
    cols        u32      K
    products    u32      P
    then per product: T (u32) and the T activation rows of ggml_dot_<type>.bin it multiplies (u32 each)
    then per product: the T * R f32 outputs, row t of the product at [t * R, (t + 1) * R)

Also testdata/quant/ggml_gelu_f16_table.bin: ggml's GELU table (ggml_table_gelu_f16, filled by ggml_cpu_init), the
65536 f16 results (u16, little-endian) of its f32 GELU-tanh at every f16 input, which its GEGLU looks up.

Activation rows include the awkward cases: all zeros, one huge value in a block, blocks whose largest magnitude is
negative or present with both signs, exact rounding ties (a block maximum of 127 makes the scale 1), scales that
are subnormal in f16, zero blocks among normal ones.
"""
import ctypes
import os
import struct
from pathlib import Path

import numpy as np

LIB = Path(__import__("llama_cpp").__file__).parent / "lib"
OUT = Path(__file__).resolve().parent.parent / "testdata" / "quant"

# name: (ggml type id, block elems, block bytes)
TYPES = {"q8_0": (8, 32, 34), "q4_0": (2, 32, 18), "q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q5_1": (7, 32, 24),
         "q4_k": (12, 256, 144), "q5_k": (13, 256, 176), "q6_k": (14, 256, 210)}
ACT = {8: (32, 34), 9: (32, 36), 15: (256, 292)}  # vec_dot_type -> (block elems, block bytes)
ROWS, ACTS, COLS = 6, 8, 768
# The activation rows of each MUL_MAT (ggml_mul_mat_<type>.bin): 7 rows (below the tiled kernel's 8), 8, and 17
# (more than one 16-row microtile band).
PRODUCTS = [list(range(7)), list(range(8)), list(range(8)) + list(range(8)) + [0]]

FromFloat = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
VecDot = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                          ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


class TypeTraitsCpu(ctypes.Structure):  # struct ggml_type_traits_cpu (ggml-cpu.h)
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int),
                ("nrows", ctypes.c_int64)]


def load():
    base = ctypes.CDLL(str(LIB / "libggml-base.so"), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    cpu = ctypes.CDLL(str(LIB / "libggml-cpu.so"), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    cpu.ggml_cpu_init.restype = None
    cpu.ggml_cpu_init()  # fills the f16 tables the kernels read
    for f in ("ggml_cpu_has_avx2", "ggml_cpu_has_fma", "ggml_cpu_has_f16c"):
        getattr(cpu, f).restype = ctypes.c_int
        assert getattr(cpu, f)() == 1, f + ": the fixtures are an AVX2 build's numbers"
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(TypeTraitsCpu)
    cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    base.ggml_quantize_chunk.restype = ctypes.c_size_t
    base.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                         ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    base.ggml_init.restype = ctypes.c_void_p
    base.ggml_init.argtypes = [InitParams]
    base.ggml_free.argtypes = [ctypes.c_void_p]
    base.ggml_new_tensor_2d.restype = ctypes.c_void_p
    base.ggml_new_tensor_2d.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    base.ggml_mul_mat.restype = ctypes.c_void_p
    base.ggml_mul_mat.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    base.ggml_new_graph.restype = ctypes.c_void_p
    base.ggml_new_graph.argtypes = [ctypes.c_void_p]
    base.ggml_build_forward_expand.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    base.ggml_get_data.restype = ctypes.c_void_p
    base.ggml_get_data.argtypes = [ctypes.c_void_p]
    base.ggml_nbytes.restype = ctypes.c_size_t
    base.ggml_nbytes.argtypes = [ctypes.c_void_p]
    cpu.ggml_graph_compute_with_ctx.restype = ctypes.c_int
    cpu.ggml_graph_compute_with_ctx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    return base, cpu


class InitParams(ctypes.Structure):  # struct ggml_init_params (ggml.h)
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def mul_mat(base, cpu, wtype, wbytes, n, k, x):
    """ggml_mul_mat(w, x) as a one-node graph on 1 thread: y [T, n] for w (n rows of k, type wtype), x [T, k] f32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    t = x.shape[0]
    ctx = base.ggml_init(InitParams(len(wbytes) + x.nbytes + t * n * 4 + (16 << 20), None, False))
    try:
        w = base.ggml_new_tensor_2d(ctx, wtype, k, n)
        assert base.ggml_nbytes(w) == len(wbytes)
        ctypes.memmove(base.ggml_get_data(w), wbytes, len(wbytes))
        b = base.ggml_new_tensor_2d(ctx, 0, k, t)  # GGML_TYPE_F32
        ctypes.memmove(base.ggml_get_data(b), x.ctypes.data, x.nbytes)
        y = base.ggml_mul_mat(ctx, w, b)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, y)
        assert cpu.ggml_graph_compute_with_ctx(ctx, graph, 1) == 0
        return np.frombuffer(ctypes.string_at(base.ggml_get_data(y), t * n * 4), dtype=np.float32).reshape(t, n).copy()
    finally:
        base.ggml_free(ctx)


def weight_rows(rng):
    w = rng.standard_normal((ROWS, COLS)).astype(np.float32) * np.float32(0.05)
    w[1] += np.float32(0.03)                    # a row with an offset (non-zero mins)
    w[2, 100:300] = 0.0                         # zero blocks
    w[3] *= np.float32(20.0)
    w[4, ::17] *= np.float32(8.0)               # outliers
    return w


def act_rows(rng):
    x = rng.standard_normal((ACTS, COLS)).astype(np.float32)
    x[1] = 0.0                                  # all zeros
    x[2, 37] = 1.0e4                            # one huge value in one block
    blk = x[3].reshape(-1, 32)                  # every block's largest magnitude negative
    blk[np.arange(blk.shape[0]), rng.integers(0, 32, blk.shape[0])] = -4.0 - rng.random(blk.shape[0],
                                                                                         dtype=np.float32)
    # exact rounding ties: a block maximum of 127 makes the scale 1 (and -1 for Q8_K), so k + 0.5 is a tie
    x[4] = rng.integers(-120, 120, COLS).astype(np.float32) + np.float32(0.5)
    x[4, ::32] = 127.0
    x[4, 64:96] = -x[4, 64:96]                  # ... with a negative maximum too
    x[4, 256 + 5] = -127.0                      # largest magnitude with both signs in one 256-block
    x[5] *= np.float32(1.0e-4)                  # f16-subnormal scales
    x[6, 32:96] = 0.0                           # zero blocks among normal ones
    x[6, 512:768] = 0.0                         # a whole zero 256-block
    x[7] *= np.float32(300.0) * rng.random(COLS, dtype=np.float32)
    return x


def write_gelu_table(cpu):
    table = (ctypes.c_uint16 * 65536).in_dll(cpu, "ggml_table_gelu_f16")
    with open(OUT / "ggml_gelu_f16_table.bin", "wb") as f:
        f.write(np.array(table, dtype="<u2").tobytes())


def main():
    base, cpu = load()
    write_gelu_table(cpu)
    rng = np.random.default_rng(20260301)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (tid, be, bb) in TYPES.items():
        traits = cpu.ggml_get_type_traits_cpu(tid).contents
        at = traits.vec_dot_type
        abe, abb = ACT[at]
        vec_dot = VecDot(traits.vec_dot)
        from_float = FromFloat(cpu.ggml_get_type_traits_cpu(at).contents.from_float)

        w = np.ascontiguousarray(weight_rows(rng))
        wbytes = ctypes.create_string_buffer(ROWS * COLS // be * bb)
        n = base.ggml_quantize_chunk(tid, w.ctypes.data, wbytes, 0, ROWS, COLS, None)
        assert n == len(wbytes.raw)

        x = np.ascontiguousarray(act_rows(rng))
        arow = COLS // abe * abb
        acts = ctypes.create_string_buffer(ACTS * arow)
        for a in range(ACTS):
            from_float(x[a].ctypes.data, ctypes.addressof(acts) + a * arow, COLS)

        wrow = COLS // be * bb
        dots = np.zeros((ACTS, ROWS), dtype=np.float32)
        s = ctypes.c_float()
        for a in range(ACTS):
            for r in range(ROWS):
                vec_dot(COLS, ctypes.addressof(s), 0, ctypes.addressof(wbytes) + r * wrow, 0,
                        ctypes.addressof(acts) + a * arow, 0, 1)
                dots[a, r] = s.value

        path = OUT / f"ggml_dot_{name}.bin"
        with open(path, "wb") as f:
            f.write(b"TLGD" + struct.pack("<6I", 1, tid, at, ROWS, ACTS, COLS))
            f.write(wbytes.raw)
            f.write(x.astype("<f4").tobytes())
            f.write(acts.raw)
            f.write(dots.astype("<f4").tobytes())
        print(f"{path}: {path.stat().st_size} bytes")

        path = OUT / f"ggml_mul_mat_{name}.bin"
        outs = [mul_mat(base, cpu, tid, wbytes.raw, ROWS, COLS, x[p]) for p in PRODUCTS]
        with open(path, "wb") as f:
            f.write(b"TLGM" + struct.pack("<5I", 1, tid, ROWS, COLS, len(PRODUCTS)))
            for p in PRODUCTS:
                f.write(struct.pack(f"<{1 + len(p)}I", len(p), *p))
            for y in outs:
                f.write(y.astype("<f4").tobytes())
        same = [int((y.view(np.uint32) == dots[p].view(np.uint32)).all()) for p, y in zip(PRODUCTS, outs)]
        print(f"{path}: {path.stat().st_size} bytes; products of {[len(p) for p in PRODUCTS]} rows equal to vec_dot: "
              f"{same}")


if __name__ == "__main__":
    main()
