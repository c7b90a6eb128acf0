#!/usr/bin/env python3
"""Writes the GGUF test fixtures in testdata/gguf/ and, next to them, fixtures.json: the values this script
put in, which tests/formats/test_gguf.cpp checks the C++ reader against.

  all_types_v3.gguf  written by the reference writer (gguf.GGUFWriter from the `gguf` PyPI package):
                     every metadata value type, arrays of ints/floats/strings/bools, nested arrays, an empty
                     string, general.alignment = 64, tensors of types F32, F16, BF16, Q8_0, Q4_0 (quantized
                     with gguf.quants), I8 and a 4-d F32 tensor.
  small_v2.gguf      version 2, which GGUFWriter cannot produce (it always writes version 3): written by hand
                     below with struct.pack. v2 and v3 share the little-endian layout (v3 only added big-endian
                     files), so the same writer functions describe both. Default alignment (32), an empty
                     array, a UINT16 array, F32 and Q8_0 tensors.

Offsets and the data section start of both files are read back with gguf.GGUFReader (the reference reader)
and recorded; the script checks the hand-written v2 offsets against it.

Run once (outputs are committed):  python3 -m venv /tmp/ggufvenv && /tmp/ggufvenv/bin/pip install gguf
                                   /tmp/ggufvenv/bin/python scripts/make_gguf_fixtures.py
"""
import json
import struct
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "gguf"


def f32(x):
    """The float32 nearest to x, as the (exact) Python float the JSON records."""
    return float(np.float32(x))


# ---- the v3 file, through the reference writer ----

# (key, value type, value, array element type); arrays hold (element type, [elements]) pairs when nested.
V3_KVS = [
    ("test.u8", V.UINT8, 200, None),
    ("test.i8", V.INT8, -100, None),
    ("test.u16", V.UINT16, 60000, None),
    ("test.i16", V.INT16, -30000, None),
    ("test.u32", V.UINT32, 4000000000, None),
    ("test.i32", V.INT32, -2000000000, None),
    ("test.f32", V.FLOAT32, f32(0.1), None),
    ("test.bool_true", V.BOOL, True, None),
    ("test.bool_false", V.BOOL, False, None),
    ("test.string", V.STRING, "h\u00e9llo w\u00f6rld \u2713", None),
    ("test.empty_string", V.STRING, "", None),
    ("test.u64", V.UINT64, 2**63 + 5, None),
    ("test.i64", V.INT64, -(2**62) - 7, None),
    ("test.f64", V.FLOAT64, 3.141592653589793, None),
    ("test.arr_i32", V.ARRAY, [1, -2, 3, 2147483647, -2147483648], V.INT32),
    ("test.arr_u8", V.ARRAY, [0, 7, 255], V.UINT8),
    ("test.arr_i64", V.ARRAY, [5, -6], V.INT64),
    ("test.arr_u32_big", V.ARRAY, [1, 4000000000], V.UINT32),
    ("test.arr_f32", V.ARRAY, [0.5, -1.25, f32(3e-5)], V.FLOAT32),
    ("test.arr_f64", V.ARRAY, [0.25, -1e300], V.FLOAT64),
    ("test.arr_str", V.ARRAY, ["a", "bc", "", "\u00fc\u2713"], V.STRING),
    ("test.arr_bool", V.ARRAY, [True, False, True], V.BOOL),
    ("test.arr_nested", V.ARRAY, [[1, 2], [3], [4, 5, 6]], V.ARRAY),
    ("test.arr_nested_str", V.ARRAY, [["x"], ["y", "zz"]], V.ARRAY),
    ("test.arr_nested3", V.ARRAY, [[[1], [2, 3]], [[4]]], V.ARRAY),
]
V3_ALIGNMENT = 64


def json_value(vtype, value):
    """A scalar or nested array as fixtures.json records it: scalars as themselves, arrays as
    {"elem_type": NAME, "elements": [...]} (recursively; the writer types lists of int INT32, of str STRING)."""
    if vtype != V.ARRAY:
        return value
    if isinstance(value[0], list):
        return {"elem_type": "ARRAY", "elements": [json_value(V.ARRAY, v) for v in value]}
    elem = {int: V.INT32, str: V.STRING}[type(value[0])]
    return {"elem_type": elem.name, "elements": list(value)}


def tensor_record(name, qtype, shape, raw, values):
    return {
        "name": name,
        "ggml_type": int(qtype),
        "type_name": qtype.name,
        "dims": list(reversed(shape)),  # ggml order: ne[0] is numpy's last axis
        "bytes": len(raw),
        "raw_hex": raw.hex(),
        "values": [float(v) for v in np.asarray(values, dtype=np.float64).ravel()],
    }


def write_v3(path):
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(str(path), arch="tracelm_test")
    w.add_custom_alignment(V3_ALIGNMENT)
    kvs = [("general.architecture", "STRING", "tracelm_test"), ("general.alignment", "UINT32", V3_ALIGNMENT)]
    for key, vtype, value, sub in V3_KVS:
        # add_string and add_array skip empty values; add_key_value writes what it is given.
        w.add_key_value(key, value, vtype, sub_type=sub if sub not in (None, V.ARRAY) else None)
        rec = json_value(vtype, value) if sub in (None, V.ARRAY) else {"elem_type": sub.name, "elements": value}
        kvs.append((key, vtype.name, rec))

    tensors = []
    x = rng.standard_normal((3, 8)).astype(np.float32)
    w.add_tensor("t.f32", x)
    tensors.append(tensor_record("t.f32", Q.F32, x.shape, x.tobytes(), x))

    x = rng.standard_normal((2, 5)).astype(np.float16)
    w.add_tensor("t.f16", x)
    tensors.append(tensor_record("t.f16", Q.F16, x.shape, x.tobytes(), x.astype(np.float32)))

    for name, qtype, shape in (("t.bf16", Q.BF16, (4, 6)), ("t.q8_0", Q.Q8_0, (2, 64)), ("t.q4_0", Q.Q4_0, (3, 32))):
        x = rng.standard_normal(shape).astype(np.float32)
        q = gguf.quants.quantize(x, qtype)
        w.add_tensor(name, q, raw_dtype=qtype)
        tensors.append(tensor_record(name, qtype, shape, q.tobytes(), gguf.quants.dequantize(q, qtype)))

    x = np.array([-128, -1, 0, 1, 127], dtype=np.int8)
    w.add_tensor("t.i8", x)
    tensors.append(tensor_record("t.i8", Q.I8, x.shape, x.tobytes(), x))

    x = rng.standard_normal((2, 1, 3, 4)).astype(np.float32)
    w.add_tensor("t.4d", x)
    tensors.append(tensor_record("t.4d", Q.F32, x.shape, x.tobytes(), x))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return kvs, tensors


# ---- the v2 file, by hand ----

def pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


SCALAR_FMT = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I", V.INT32: "<i",
              V.FLOAT32: "<f", V.BOOL: "<?", V.UINT64: "<Q", V.INT64: "<q", V.FLOAT64: "<d"}


def pack_value(vtype, value, sub=None):
    if vtype == V.STRING:
        return pack_string(value)
    if vtype == V.ARRAY:
        return struct.pack("<IQ", sub, len(value)) + b"".join(pack_value(sub, v) for v in value)
    return struct.pack(SCALAR_FMT[vtype], value)


def write_v2(path):
    alignment = 32  # the default: no general.alignment key
    kvs = [
        ("general.architecture", V.STRING, "llama", None),
        ("llama.block_count", V.UINT32, 2, None),
        ("test.scale", V.FLOAT32, 0.25, None),
        ("test.flag", V.BOOL, False, None),
        ("tokenizer.ggml.tokens", V.ARRAY, ["<s>", "a", "b"], V.STRING),
        ("test.empty_array", V.ARRAY, [], V.INT32),
        ("test.u16_array", V.ARRAY, [1, 65535], V.UINT16),
    ]
    rng = np.random.default_rng(99)
    x_f32 = rng.standard_normal((2, 4)).astype(np.float32)
    x_q = rng.standard_normal((1, 32)).astype(np.float32)
    q = gguf.quants.quantize(x_q, Q.Q8_0)
    tensors = [("w.f32", Q.F32, x_f32.shape, x_f32.tobytes(), x_f32),
               ("w.q8_0", Q.Q8_0, x_q.shape, q.tobytes(), gguf.quants.dequantize(q, Q.Q8_0))]

    out = b"GGUF" + struct.pack("<IQQ", 2, len(tensors), len(kvs))
    for key, vtype, value, sub in kvs:
        out += pack_string(key) + struct.pack("<I", vtype) + pack_value(vtype, value, sub)
    offsets, offset = [], 0
    for name, qtype, shape, raw, _ in tensors:
        dims = list(reversed(shape))
        out += pack_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", qtype, offset)
        offsets.append(offset)
        offset += -(-len(raw) // alignment) * alignment
    data_offset = -(-len(out) // alignment) * alignment
    out += bytes(data_offset - len(out))
    for _, _, _, raw, _ in tensors:
        out += raw + bytes(-len(raw) % alignment)
    path.write_bytes(out)

    kv_records = [(k, t.name, {"elem_type": s.name, "elements": v} if t == V.ARRAY else v) for k, t, v, s in kvs]
    recs = []
    for (name, qtype, shape, raw, values), off in zip(tensors, offsets):
        recs.append(tensor_record(name, qtype, shape, raw, values) | {"offset": off})
    return kv_records, recs, data_offset


def read_back(path, kvs, tensors):
    """Offsets as the reference reader sees them; it must also see exactly the keys recorded, in order."""
    r = gguf.GGUFReader(str(path))
    assert [k for k in r.fields if not k.startswith("GGUF.")] == [kv[0] for kv in kvs], path
    by_name = {t.name: t for t in r.tensors}
    for t in tensors:
        offset = int(by_name[t["name"]].data_offset) - int(r.data_offset)
        assert t.setdefault("offset", offset) == offset, (path, t["name"])
    return int(r.data_offset)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    files = {}

    p = OUT / "all_types_v3.gguf"
    kvs, tensors = write_v3(p)
    data_offset = read_back(p, kvs, tensors)
    files[p.name] = {"version": 3, "alignment": V3_ALIGNMENT, "data_offset": data_offset,
                     "file_size": p.stat().st_size,
                     "metadata": [{"key": k, "type": t, "value": v} for k, t, v in kvs], "tensors": tensors}

    p = OUT / "small_v2.gguf"
    kvs, tensors, data_offset = write_v2(p)
    assert read_back(p, kvs, tensors) == data_offset
    files[p.name] = {"version": 2, "alignment": 32, "data_offset": data_offset, "file_size": p.stat().st_size,
                     "metadata": [{"key": k, "type": t, "value": v} for k, t, v in kvs], "tensors": tensors}

    (OUT / "fixtures.json").write_text(json.dumps({"files": files}, indent=1, ensure_ascii=False) + "\n")
    for name, f in files.items():
        print(f"{name}: {f['file_size']} bytes, {len(f['metadata'])} keys, {len(f['tensors'])} tensors")


if __name__ == "__main__":
    main()
