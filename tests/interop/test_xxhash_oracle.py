#!/usr/bin/env python3
"""Interop oracle: checks ckpt files with an independent reader (ckpt_spec_reader.py, written from
spec/FORMAT.md) and the Python xxhash package, which shares no code with the C++ library.

For the golden files of spec/golden/ and for freshly written files, it checks every chunk digest,
the superblock, index and footer digests, every tensor's bytes and the metadata against the JSON
description that comes with each file; the XXH3-64 golden vectors; and that damage in every region
is caught. Optional: a safetensors file made with the Python safetensors package, converted by
ckpt-convert, read back by the independent reader.

Exit status: 0 all checks passed, 1 a check failed, 77 skipped (xxhash not installed).
"""

import argparse
import glob
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_util  # noqa: E402
from interop_util import check, finish, run, skip  # noqa: E402

try:
    import xxhash
except ImportError:
    skip("the Python xxhash package is not installed")

from ckpt_spec_reader import CkptFile, FormatError  # noqa: E402


def xxh(data):
    return xxhash.xxh3_64_intdigest(data)


def check_vectors(golden_dir):
    with open(os.path.join(golden_dir, "xxh3_64.json")) as f:
        spec = json.load(f)
    pattern = bytes((i * 131 + 17) & 0xFF for i in range(6000))
    for v in spec["vectors"]:
        n = v["length"]
        check(xxhash.xxh3_64_hexdigest(pattern[:n]) == v["digest"], "xxh3_64 vector of length %d" % n)
    check(xxh(b"") == 0x2D06800538D394C2, "xxh3_64 of the empty input")


def check_described(path, desc):
    """Checks one .ckpt against its JSON description, with raw offsets and xxhash only, then the reader."""
    name = os.path.basename(path)
    with open(path, "rb") as f:
        data = f.read()
    check(len(data) == desc["file_size"], "%s: file size" % name)

    # Digests straight from the byte ranges of the spec, without the reader (2.2, 3, 6).
    (sb_digest,) = struct.unpack_from("<Q", data, 120)
    check(sb_digest == xxh(data[0:120]), "%s: superblock digest" % name)
    footer = data[len(data) - 64:]
    (ft_digest,) = struct.unpack_from("<Q", footer, 48)
    check(ft_digest == xxh(footer[0:48]), "%s: footer digest" % name)
    (index_offset, index_length, index_digest) = struct.unpack_from("<QQQ", footer, 0)
    check(index_offset == desc["index_offset"] and index_length == desc["index_length"], "%s: index position" % name)
    check(xxh(data[index_offset:index_offset + index_length]) == index_digest, "%s: index digest" % name)
    check("%016x" % index_digest == desc["index_digest"], "%s: index digest as described" % name)
    for t in desc["tensors"]:
        for p in t["pieces"]:
            for c in p["chunks"]:
                got = xxh(data[c["offset"]:c["offset"] + c["length"]])
                check("%016x" % got == c["digest"], "%s: chunk at %d of '%s'" % (name, c["offset"], t["name"]))

    # The independent reader: structure, tensors and metadata.
    try:
        r = CkptFile.parse(data)
    except FormatError as e:
        check(False, "%s: spec reader refused the file: %s" % (name, e))
        return
    check(r.uuid.hex() == desc["uuid"].replace("-", ""), "%s: uuid" % name)
    check(r.alignment == desc["alignment"] and r.chunk_size == desc["chunk_size"], "%s: parameters" % name)
    check(r.data_offset == desc["data_offset"], "%s: data offset" % name)
    check(r.verify() == [], "%s: spec reader verify: %s" % (name, r.verify()))
    check([t["name"] for t in r.tensors] == [t["name"] for t in desc["tensors"]], "%s: tensor names and order" % name)
    for t, dt in zip(r.tensors, desc["tensors"]):
        where = "%s: tensor '%s'" % (name, t["name"])
        check(t["dtype"] == dt["dtype"] and t["shape"] == dt["shape"], where + ": dtype and shape")
        check(len(t["pieces"]) == len(dt["pieces"]), where + ": piece count")
        for p, dp in zip(t["pieces"], dt["pieces"]):
            check(p["offsets"] == dp["offsets"] and p["shape"] == dp["shape"], where + ": piece region")
            check(p["data_offset"] == dp["data_offset"] and p["data_length"] == dp["data_length"], where + ": piece place")
            check([(c["offset"], c["length"], "%016x" % c["digest"]) for c in p["chunks"]] ==
                  [(c["offset"], c["length"], c["digest"]) for c in dp["chunks"]], where + ": chunk table")
            check(r.piece_bytes(p).hex() == dp["data_hex"], where + ": piece bytes")
        whole = r.tensor_bytes(t["name"])
        if dt["complete"]:
            check(whole is not None and whole.hex() == dt["data_hex"], where + ": tensor bytes")
        else:
            check(whole is None, where + ": a partial tensor is not reported whole")
    check(len(r.metadata) == len(desc["metadata"]), "%s: metadata count" % name)
    for m, dm in zip(r.metadata, desc["metadata"]):
        where = "%s: metadata '%s'" % (name, dm["key"])
        check(m["key"] == dm["key"] and m["type"] == dm["type"], where + ": key and type")
        if dm["type"] == "float64":
            check(m["bits"] == dm["bits"], where + ": float64 bits")
        elif dm["type"] == "bytes":
            check(m["value"].hex() == dm["hex"], where + ": bytes")
        else:
            check(m["value"] == dm["value"] and type(m["value"]) is type(dm["value"]), where + ": value")
    return r


def check_damage(path, r):
    """Damage in every region is caught: by the reader's parse, a chunk digest, or verify (8.2)."""
    name = os.path.basename(path)
    with open(path, "rb") as f:
        data = f.read()
    targets = {"superblock magic": 0, "superblock uuid": 40, "superblock digest": 120,
               "index header": r.index_offset + 8, "index last byte": r.footer_offset - 1,
               "footer index offset": r.footer_offset, "footer uuid": r.footer_offset + 24,
               "footer digest": r.footer_offset + 48, "footer magic": len(data) - 1}
    if r.data_offset > 128:
        targets["superblock padding"] = 200
    for t in r.tensors:
        for p in t["pieces"]:
            for c in p["chunks"]:
                targets["chunk of '%s' at %d" % (t["name"], c["offset"])] = c["offset"] + c["length"] - 1
            end = p["data_offset"] + p["data_length"]
            if end < r.index_offset and end % r.alignment and end not in [q["data_offset"] for u in r.tensors for q in u["pieces"]]:
                targets["padding after '%s'" % t["name"]] = end
    for what, off in targets.items():
        damaged = bytearray(data)
        damaged[off] ^= 0x40
        try:
            caught = CkptFile.parse(bytes(damaged)).verify() != []
        except FormatError:
            caught = True
        check(caught, "%s: a flipped bit in the %s (offset %d) goes unnoticed" % (name, what, off))
    for what, mutated, kind in (("truncated by one byte", data[:-1], "incomplete"),
                                ("one byte appended", data + b"\0", "incomplete"),
                                ("cut to the superblock", data[:128], "incomplete")):
        try:
            CkptFile.parse(mutated)
            check(False, "%s: %s is accepted" % (name, what))
        except FormatError as e:
            check(e.kind == kind, "%s: %s is %s, expected %s" % (name, what, e.kind, kind))
    # An unknown incompat flag must be refused as a version problem, even with a valid digest (3.2).
    flagged = bytearray(data)
    flagged[32] |= 1
    struct.pack_into("<Q", flagged, 120, xxh(bytes(flagged[0:120])))
    try:
        CkptFile.parse(bytes(flagged))
        check(False, "%s: unknown incompat flag accepted" % name)
    except FormatError as e:
        check(e.kind == "version", "%s: unknown incompat flag is %s, expected version" % (name, e.kind))


def check_directory(directory, label):
    described = sorted(glob.glob(os.path.join(directory, "*.json")))
    count = 0
    for desc_path in described:
        ckpt_path = desc_path[:-5] + ".ckpt"
        if not os.path.exists(ckpt_path):
            continue
        with open(desc_path) as f:
            desc = json.load(f)
        r = check_described(ckpt_path, desc)
        if r is not None:
            check_damage(ckpt_path, r)
        count += 1
    check(count > 0, "%s: no described .ckpt files in %s" % (label, directory))
    print("%s: %d files checked" % (label, count))


def check_convert(convert, work):
    """safetensors (Python package) -> ckpt-convert -> independent reader."""
    try:
        import numpy as np
        from safetensors.numpy import save_file
    except ImportError:
        print("ckpt-convert: numpy or safetensors missing, not checked")
        return
    rng = np.random.default_rng(7)
    arrays = {
        "w": rng.standard_normal((33, 70)).astype(np.float32),
        "h": rng.standard_normal((5, 3000)).astype(np.float16),
        "ids": rng.integers(-2**40, 2**40, size=(1000,), dtype=np.int64),
        "mask": rng.integers(0, 2, size=(7, 7)).astype(np.bool_),
        "bytes": rng.integers(0, 255, size=(4097,), dtype=np.uint8),
        "scalar": np.array(3.25, dtype=np.float64),
    }
    src = os.path.join(work, "convert.safetensors")
    out = os.path.join(work, "convert.ckpt")
    save_file(arrays, src, metadata={"origin": "python safetensors", "step": "12"})
    rc, _, err = run(convert, src, out, "--chunk-size", "4096", "--alignment", "64", "--force")
    if not check(rc == 0, "ckpt-convert exited %d: %s" % (rc, err.strip())):
        return
    try:
        r = CkptFile.open(out)
    except FormatError as e:
        check(False, "convert.ckpt: spec reader refused the file: %s" % e)
        return
    check(r.verify() == [], "convert.ckpt: verify")
    dtypes = {"w": "F32", "h": "F16", "ids": "I64", "mask": "BOOL", "bytes": "U8", "scalar": "F64"}
    for name, a in arrays.items():
        t = r.tensor(name)
        check(t["dtype"] == dtypes[name] and t["shape"] == list(a.shape), "convert.ckpt: '%s' dtype and shape" % name)
        check(r.tensor_bytes(name) == a.astype(a.dtype.newbyteorder("<")).tobytes(), "convert.ckpt: '%s' bytes" % name)
    meta = {m["key"]: m["value"] for m in r.metadata}
    check(meta.get("origin") == "python safetensors" and meta.get("step") == "12", "convert.ckpt: metadata %s" % meta)
    print("ckpt-convert: %d tensors checked" % len(arrays))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--golden-dir", required=True)
    ap.add_argument("--fresh-writer", help="test_golden executable; writes fresh files with \"[interop_fresh]\"")
    ap.add_argument("--convert", help="ckpt-convert executable (optional)")
    ap.add_argument("--work-dir", required=True)
    args = ap.parse_args()

    interop_util.only_failures()  # a check per chunk and per damaged byte: print the failures only
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    check_vectors(args.golden_dir)
    check_directory(args.golden_dir, "golden")
    if args.fresh_writer:
        fresh = os.path.join(args.work_dir, "fresh")
        os.makedirs(fresh)
        env = dict(os.environ, CKPT_INTEROP_OUT=fresh)
        rc, out, _ = run(args.fresh_writer, "[interop_fresh]", env=env)
        check(rc == 0, "fresh writer exited %d: %s" % (rc, out[-2000:]))
        check_directory(fresh, "fresh")
    if args.convert:
        check_convert(args.convert, args.work_dir)
    if not interop_util.failures:
        shutil.rmtree(args.work_dir, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
