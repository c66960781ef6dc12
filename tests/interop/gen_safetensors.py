#!/usr/bin/env python3
"""Writes safetensors files with the reference implementation (the `safetensors` package), as an
independent oracle for ckpt's converter.

    gen_safetensors.py OUTDIR                       the interop corpus, one file per case
    gen_safetensors.py --random PATH --bytes N      one file of random tensors totalling about N bytes
"""
import argparse
import ctypes
import math
import os
import sys

import numpy as np
import safetensors
import safetensors.numpy

# safetensors header dtype -> the name the Python package's serializer takes.
SERIALIZER_NAMES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16",
    "U32": "uint32", "I32": "int32", "U64": "uint64", "I64": "int64",
    "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "C64": "complex64",
}
DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "U32": 4, "I32": 4, "U64": 8, "I64": 8,
               "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "C64": 8}


def random_bytes(rng, dtype, shape):
    n = math.prod(shape) * DTYPE_SIZES[dtype]
    raw = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
    if dtype == "BOOL":  # only 0 and 1 are booleans
        raw = bytes(b & 1 for b in raw)
    return raw


def save_raw(tensors, path, metadata=None):
    """tensors: {name: (dtype code, shape, bytes)} through the package's low-level serializer,
    which takes every dtype, including those numpy lacks (BF16, FP8)."""
    if hasattr(safetensors, "TensorSpec"):  # 0.6+: specs point at caller-owned memory
        keep_alive, specs = [], {}
        for name, (dtype, shape, data) in tensors.items():
            buf = (ctypes.c_char * max(len(data), 1)).from_buffer_copy(data or b"\0")
            keep_alive.append(buf)
            specs[name] = safetensors.TensorSpec(dtype=SERIALIZER_NAMES[dtype], shape=list(shape),
                                                 data_ptr=ctypes.addressof(buf), data_len=len(data))
        safetensors.serialize_file(specs, path, metadata=metadata)
    else:  # older releases take the bytes themselves
        specs = {name: {"dtype": SERIALIZER_NAMES[dtype], "shape": list(shape), "data": data}
                 for name, (dtype, shape, data) in tensors.items()}
        safetensors.serialize_file(specs, path, metadata)


def serializer_supports(dtype):
    if not hasattr(safetensors, "TensorSpec"):
        return dtype not in ("F8_E8M0", "C64")
    try:
        buf = ctypes.create_string_buffer(1)
        safetensors.TensorSpec(dtype=SERIALIZER_NAMES[dtype], shape=[1], data_ptr=ctypes.addressof(buf), data_len=1)
        return True
    except Exception:  # noqa: BLE001 - an unknown dtype is a plain "no"
        return False


def corpus(outdir):
    """Writes every case; returns {case name: path}."""
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(20240611)
    files = {}

    def raw(case, spec, metadata=None):
        path = os.path.join(outdir, case + ".safetensors")
        save_raw({n: (d, s, random_bytes(rng, d, s)) for n, (d, s) in spec.items()}, path, metadata)
        files[case] = path

    def npy(case, arrays, metadata=None):
        path = os.path.join(outdir, case + ".safetensors")
        safetensors.numpy.save_file(arrays, path, metadata=metadata)
        files[case] = path

    npy("scalars", {"f32": np.array(1.5, dtype=np.float32), "f64": np.array(-2.25), "i8": np.array(-7, dtype=np.int8),
                    "b": np.array(True)})
    npy("empty_dims", {"e0": np.zeros((0,), np.float32), "e1": np.zeros((0, 3), np.int64),
                       "e2": np.zeros((3, 0), np.uint8), "e3": np.zeros((2, 0, 5), np.float16),
                       "full": np.arange(6, dtype=np.int32).reshape(2, 3)})
    raw("odd_bytes", {"u8": ("U8", [7]), "i8": ("I8", [3, 5]), "b": ("BOOL", [13]), "f8": ("F8_E4M3", [11]),
                      "f16": ("F16", [3]), "f32": ("F32", [5])})
    npy("bool", {"mask": rng.integers(0, 2, size=(17, 3)).astype(bool), "one": np.array([True])})
    fp8 = {"e4m3": ("F8_E4M3", [4, 33]), "e5m2": ("F8_E5M2", [65])}
    if serializer_supports("F8_E8M0"):
        fp8["e8m0"] = ("F8_E8M0", [9])
    raw("fp8", fp8)
    raw("half", {"bf16": ("BF16", [16, 9]), "f16": ("F16", [3, 3, 3]), "bf16_scalar": ("BF16", [])})
    npy("integers", {name: rng.integers(np.iinfo(t).min, np.iinfo(t).max, size=(5, 3), dtype=t, endpoint=True)
                     for name, t in [("u8", np.uint8), ("i8", np.int8), ("u16", np.uint16), ("i16", np.int16),
                                     ("u32", np.uint32), ("i32", np.int32), ("u64", np.uint64), ("i64", np.int64)]})
    floats = {"f32": ("F32", [4, 4]), "f64": ("F64", [7])}
    if serializer_supports("C64"):
        floats["c64"] = ("C64", [3])
    raw("floats", floats)
    raw("non_ascii_names", {"caf\u00e9": ("F32", [2]), "\u540d\u524d": ("I16", [3]), "emoji \U0001F600": ("U8", [1]),
                            "a/b.c:d": ("F16", [2]), "with space": ("U8", [2]), "quote\"back\\slash": ("I8", [2]),
                            "tab\there": ("U8", [1])}, metadata={"clé": "valeur \u2713"})
    # Larger than one 1 MiB chunk, with sizes that are not multiples of it.
    raw("large", {"big": ("F32", [3, 262145]), "mib_plus_one": ("U8", [(1 << 20) + 1]), "tail": ("BF16", [5])})
    dtypes = sorted(DTYPE_SIZES)
    many = {}
    for i in range(400):
        d = dtypes[i % len(dtypes)]
        if not serializer_supports(d):
            d = "U8"
        many["layers.%03d.%s" % (i, d.lower())] = (d, [i % 5, (i * 7) % 11 + 1] if i % 3 else [i % 13])
    raw("many", many, metadata={"count": "400"})
    npy("metadata", {"w": np.ones((2, 2), np.float32)},
        metadata={"format": "pt", "empty": "", "json": "{\"a\": [1, 2]}", "unicode": "\u00fc\u00f1\u00ee \U0001F680",
                  "newline": "line1\nline2", "long": "x" * 5000})
    return files


def random_file(path, total):
    """About `total` bytes of random tensors in 64 MiB pieces (float32 and bf16)."""
    rng = np.random.default_rng(1)
    piece = 64 << 20
    tensors, left, i = {}, total, 0
    while left > 0:
        n = min(piece, left) // 4 * 4
        if n == 0:
            break
        dtype = "F32" if i % 2 == 0 else "BF16"
        count = n // DTYPE_SIZES[dtype]
        tensors["t%03d" % i] = (dtype, [count], rng.integers(0, 256, size=n, dtype=np.uint8).tobytes())
        left -= n
        i += 1
    save_raw(tensors, path, {"generator": "gen_safetensors.py --random"})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", nargs="?")
    parser.add_argument("--random", metavar="PATH")
    parser.add_argument("--bytes", type=int, default=1 << 30)
    args = parser.parse_args()
    if args.random:
        random_file(args.random, args.bytes)
    elif args.outdir:
        for case, path in sorted(corpus(args.outdir).items()):
            print(case, path)
    else:
        parser.error("give OUTDIR or --random PATH")
    return 0


if __name__ == "__main__":
    sys.exit(main())
