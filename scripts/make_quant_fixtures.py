#!/usr/bin/env python3
"""Writes the GGML block-quantization fixtures of tests/backends/test_quant.cpp to testdata/quant/ (not run in CI).

The reference is the `gguf` package (gguf-py, the llama.cpp project's Python library):
    python -m venv /tmp/ggufvenv && /tmp/ggufvenv/bin/pip install gguf numpy
    /tmp/ggufvenv/bin/python scripts/make_quant_fixtures.py

One file per type, testdata/quant/<type>.bin (type in lower case: q8_0, q4_0, ... q6_k), little-endian:
    magic     4 bytes  b"TLQF"
    version   u32      1
    ggml_type u32      GGMLQuantizationType value
    rows      u32
    cols      u32      a multiple of the type's block
    blocks    rows * cols / block_elems * block_bytes raw block bytes, rows one after another
    values    rows * cols f32: gguf.quants.dequantize of the blocks

For the 32-element types the blocks are gguf.quants.quantize of deterministic data; gguf-py cannot quantize the
K types, so their blocks are deterministic random bytes (every byte pattern is a valid block apart from scales
that decode to inf/NaN, which are avoided). Either way the tests compare against gguf's dequantization of the
very bytes stored. Rows cover edge cases: all zero, large magnitudes, all negative, zero blocks among normal
ones, tiny (subnormal f16) scales, then ordinary data at several scales.

For the quantizers (src/formats/quantize.cpp), testdata/quant/quantize_<type>.bin (q8_0, q4_0) holds f32 input and
gguf.quants.quantize of it, little-endian:
    magic     4 bytes  b"TLQI"
    version   u32      1
    ggml_type u32
    rows      u32
    cols      u32
    input     rows * cols f32
    blocks    rows * cols / block_elems * block_bytes bytes: gguf.quants.quantize(input)
The rows are those above plus one of crafted blocks: rounding ties of each type, a largest magnitude that occurs
with both signs (Q4_0 takes the first), negative zeros, constant blocks and very small (but normal) values.
"""
import struct
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

ROWS, COLS = 10, 512
OUT = Path(__file__).resolve().parent.parent / "testdata" / "quant"


def float_rows(rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x[0] = 0.0                                   # all-zero blocks
    x[1] *= 1000.0                               # large magnitudes (scales and mins stay finite in f16)
    x[2] = -np.abs(x[2]) - 0.25                  # all negative
    x[3, ::64] *= 50.0                           # outliers
    x[3, 64:192] = 0.0                           # zero blocks inside a row
    x[4] *= 1e-6                                 # subnormal f16 scales
    for r in range(5, ROWS):
        x[r] *= np.float32(10.0 ** rng.uniform(-2, 1))
    return x


def f16_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(-1, 2)


def random_k_blocks(qtype: Q, rng: np.random.Generator) -> np.ndarray:
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    n = COLS // block_elems
    rows = []
    for r in range(ROWS):
        b = rng.integers(0, 256, size=(n, block_bytes), dtype=np.uint8)
        # Scales per row: zero, large, negative, zero in some blocks, subnormal, ordinary.
        mag = [0.0, 1000.0, 1.0, 1.0, 1e-7][r] if r < 5 else 10.0 ** rng.uniform(-3, 0)
        d = (rng.uniform(0.5, 1.0, n) * mag).astype(np.float32)
        dmin = (rng.uniform(0.0, 1.0, n) * mag).astype(np.float32)
        if r == 2:
            d, dmin = -d, -dmin
        if r == 3:
            d[::2] = 0.0
        if r == 0:
            b[:] = 0
        if qtype == Q.Q6_K:
            b[:, 208:210] = f16_bytes(d)
        else:
            b[:, 0:2] = f16_bytes(d)
            b[:, 2:4] = f16_bytes(dmin)
        rows.append(b.reshape(-1))
    return np.stack(rows)


def tie_row() -> np.ndarray:
    """A row of crafted 32-element blocks (zero elsewhere)."""
    x = np.zeros(COLS, dtype=np.float32)
    blocks = [
        # Q8_0 with max 127: d = 1, so these land exactly on .5 (roundf rounds away from zero).
        [127.0, 2.5, -2.5, 3.5, -3.5, 0.5, -0.5, 126.5, -126.5, 1.5, -1.5],
        # Q4_0 with max -8: d = 1, x + 8.5 truncated (0.5 -> 9, -0.5 -> 8, 7.5 -> 16 clipped to 15).
        [-8.0, 0.5, -0.5, 1.5, -1.5, 6.5, 7.0, 7.5, -7.5, 3.25, -3.75],
        [-3.0, 3.0, 1.0, -1.0, 2.0],      # largest magnitude with both signs: the first one counts
        [3.0, -3.0, 1.0, -1.0, -2.0],
        [-0.0, 0.0, -0.0, 1e-3, -0.0],
        [0.7] * 32,                       # constant
        [-0.7] * 32,
        [1e-30, -3e-30, 2e-30, 7e-31],    # tiny but normal f32: d underflows f16 to zero
        [65504.0 * 8.0, -1.0, 100.0],     # d near the top of f16's range
    ]
    for i, b in enumerate(blocks):
        x[32 * i:32 * i + len(b)] = b
    rng = np.random.default_rng(7)
    rest = 32 * len(blocks)
    x[rest:] = rng.standard_normal(COLS - rest).astype(np.float32)
    return x


def write_quantize_fixtures() -> None:
    for i, qtype in enumerate([Q.Q8_0, Q.Q4_0]):
        rng = np.random.default_rng(2000 + i)
        x = np.concatenate([float_rows(rng), tie_row()[None, :]]).astype("<f4")
        blocks = quantize(x, qtype)
        path = OUT / f"quantize_{qtype.name.lower()}.bin"
        with open(path, "wb") as f:
            f.write(b"TLQI" + struct.pack("<4I", 1, int(qtype), x.shape[0], x.shape[1]))
            f.write(x.tobytes())
            f.write(np.ascontiguousarray(blocks).tobytes())
        print(path, path.stat().st_size, "bytes")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for i, qtype in enumerate([Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K]):
        rng = np.random.default_rng(1000 + i)
        if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
            blocks = random_k_blocks(qtype, rng)
        else:
            blocks = quantize(float_rows(rng), qtype)
        values = dequantize(blocks, qtype).astype("<f4")
        assert values.shape == (ROWS, COLS) and np.isfinite(values).all()
        path = OUT / f"{qtype.name.lower()}.bin"
        with open(path, "wb") as f:
            f.write(b"TLQF" + struct.pack("<4I", 1, int(qtype), ROWS, COLS))
            f.write(np.ascontiguousarray(blocks).tobytes())
            f.write(values.tobytes())
        print(path, path.stat().st_size, "bytes")
    write_quantize_fixtures()


if __name__ == "__main__":
    main()
