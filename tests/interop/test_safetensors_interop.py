#!/usr/bin/env python3
"""Interop of ckpt-convert with the reference safetensors implementation (the Python package).

    test_safetensors_interop.py BINARY_DIR

For every file of the generated corpus: safetensors -> ckpt (ckpt-convert), ckpt-verify on the
result, ckpt -> safetensors, then the package loads both files and they must agree on names, dtypes,
shapes, bytes and __metadata__. Files ckpt writes must also load through the package's own reader.
Corrupted files (truncated, bad JSON, ...) must make ckpt-convert exit 2 with a one-line message and
leave no output. A store made by ckpt-reshard (steps of 3 and 2 shard files) is exported by
ckpt-convert (latest step, --step N, a step directory) and the package must load exactly the tensors
of the original safetensors file; a damaged shard is exit 1 with no output. Exit 0 all passed, 1 a check failed, 77 the Python oracles are not installed.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np  # noqa: F401 - the generator needs it
    import safetensors
    from safetensors import safe_open
except ImportError as e:
    print("skipped: Python oracle missing: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_safetensors  # noqa: E402

FAILURES = []


def check(condition, what):
    if condition:
        print("ok    " + what)
    else:
        print("FAIL  " + what)
        FAILURES.append(what)
    return condition


def run(tool, *args):
    p = subprocess.run([tool] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def load(path):
    """What the reference implementation sees: {name: (dtype, shape, bytes)} and the metadata."""
    with open(path, "rb") as f:
        content = f.read()
    tensors = {name: (v["dtype"], list(v["shape"]), bytes(v["data"])) for name, v in safetensors.deserialize(content)}
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
    return tensors, metadata


def check_numpy_reader(path, tensors, label):
    """Loads each numpy-representable tensor through safe_open (the mmap path), compared byte for byte."""
    numpy_dtypes = {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "F32", "F64", "C64"}
    with safe_open(path, framework="numpy") as f:
        keys = set(f.keys())
        same = keys == set(tensors)
        for name, (dtype, shape, data) in tensors.items():
            if dtype in numpy_dtypes and name in keys:
                arr = f.get_tensor(name)
                same = same and list(arr.shape) == shape and arr.tobytes() == data
    check(same, "%s: safe_open reads what ckpt-convert wrote" % label)


def round_trip(tools, case, src, workdir, extra_args):
    convert, verify = tools
    ckpt = os.path.join(workdir, case + ".ckpt")
    back = os.path.join(workdir, case + ".back.safetensors")
    rc, out, err = run(convert, src, ckpt, "--json", *extra_args)
    if not check(rc == 0, "%s: safetensors -> ckpt exits 0 (got %d: %s)" % (case, rc, err.strip())):
        return
    summary = json.loads(out)
    original, original_meta = load(src)
    check(summary["tensors"] == len(original) and summary["output"] == ckpt, "%s: --json summary counts %d tensors" % (case, len(original)))
    if os.path.exists(verify):
        rc, out, err = run(verify, ckpt)
        check(rc == 0, "%s: ckpt-verify passes the converted file (got %d: %s)" % (case, rc, (out + err).strip()))
    else:
        print("skip  %s: ckpt-verify not built" % case)
    rc, out, err = run(convert, ckpt, back)
    if not check(rc == 0, "%s: ckpt -> safetensors exits 0 (got %d: %s)" % (case, rc, err.strip())):
        return
    again, again_meta = load(back)
    check(sorted(again) == sorted(original), "%s: same tensor names" % case)
    for name in original:
        if name in again:
            check(again[name][0] == original[name][0] and again[name][1] == original[name][1],
                  "%s: %r keeps dtype %s and shape %s" % (case, name, original[name][0], original[name][1]))
            check(again[name][2] == original[name][2], "%s: %r keeps its %d bytes" % (case, name, len(original[name][2])))
    check(again_meta == original_meta, "%s: __metadata__ survives (%d keys)" % (case, len(original_meta)))
    with open(back, "rb") as f:
        (header_length,) = struct.unpack("<Q", f.read(8))
    check(header_length % 8 == 0, "%s: header padded to a multiple of 8" % case)
    check_numpy_reader(back, again, case)
    leftovers = [n for n in os.listdir(workdir) if ".tmp-" in n]
    check(not leftovers, "%s: no temporary files left (%s)" % (case, leftovers))


def corruptions(valid):
    """(label, bytes) for hostile variants of a valid safetensors file."""
    (n,) = struct.unpack("<Q", valid[:8])
    header = json.loads(valid[8:8 + n])

    def rewrite(h, data=None):
        text = json.dumps(h, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text + (valid[8 + n:] if data is None else data)

    text = valid[8:8 + n]
    unclosed = text[:text.rindex(b"}")] + b" " + text[text.rindex(b"}") + 1:]
    first = next(k for k in header if k != "__metadata__" and header[k]["data_offsets"][1] > header[k]["data_offsets"][0])
    out = [
        ("empty file", b""),
        ("truncated inside the length field", valid[:5]),
        ("truncated inside the header", valid[:8 + n // 2]),
        ("truncated inside the data", valid[:-1]),
        ("extra byte after the data", valid + b"\0"),
        ("header length past the end", struct.pack("<Q", len(valid)) + valid[8:]),
        ("header length 2^63", struct.pack("<Q", 1 << 63) + valid[8:]),
        ("bad JSON (unclosed object)", valid[:8] + unclosed + valid[8 + n:]),
        ("header starts with [", valid[:8] + b"[" + valid[9:]),
        ("JSON array header", rewrite([1, 2])),
    ]
    h = json.loads(json.dumps(header))
    h[first]["dtype"] = "F4"
    out.append(("unknown dtype", rewrite(h)))
    h = json.loads(json.dumps(header))
    h[first]["shape"] = [-1]
    out.append(("negative shape", rewrite(h)))
    h = json.loads(json.dumps(header))
    h[first]["data_offsets"][1] += 1
    out.append(("size mismatch", rewrite(h)))
    h = json.loads(json.dumps(header))
    h[first]["extra"] = 1
    out.append(("unknown field", rewrite(h)))
    h = json.loads(json.dumps(header))
    h["__metadata__"] = {"k": 1}
    out.append(("non-string metadata", rewrite(h)))
    h = json.loads(json.dumps(header))
    b, e = h[first]["data_offsets"]
    h["overlapping"] = {"dtype": "U8", "shape": [e - b], "data_offsets": [b, e]}
    out.append(("overlapping tensors", rewrite(h)))
    return out


def convert_alone(convert, workdir, label, name, content, out_name):
    """Converts `content`, written as `name` in a fresh directory of its own. Returns the exit status,
    stderr, the input's path and what the directory holds afterwards."""
    sub = os.path.join(workdir, "hostile-" + label.replace(" ", "_").replace("^", ""))
    os.mkdir(sub)
    path = os.path.join(sub, name)
    with open(path, "wb") as f:
        f.write(content)
    rc, _, err = run(convert, path, os.path.join(sub, out_name))
    return rc, err, path, os.listdir(sub)


def hostile(tools, corpus_files, workdir):
    convert = tools[0]
    with open(corpus_files["large"], "rb") as f:
        valid = f.read()
    for label, content in corruptions(valid):
        rc, err, path, left = convert_alone(convert, workdir, label, "in.safetensors", content, "out.ckpt")
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and path in lines[0] and left == ["in.safetensors"],
              "hostile %s: exit 2, one line naming the file, no output (got %d: %s)" % (label, rc, err.strip()))
    # A damaged or truncated .ckpt is refused as an integrity finding: exit 1, no output.
    ckpt = os.path.join(workdir, "hostile-ckpt.ckpt")
    rc, _, err = run(convert, corpus_files["large"], ckpt, "--chunk-size", "65536")
    check(rc == 0, "hostile ckpt: source converts (%s)" % err.strip())
    with open(ckpt, "rb") as f:
        content = bytearray(f.read())
    for label, damaged in [("flipped data byte", content[:70000] + bytes([content[70000] ^ 1]) + content[70001:]),
                           ("truncated ckpt", content[:len(content) // 2])]:
        rc, err, _, left = convert_alone(convert, workdir, label, "in.ckpt", damaged, "out.safetensors")
        lines = err.strip().splitlines()
        check(rc == 1 and len(lines) == 1 and left == ["in.ckpt"],
              "hostile %s: exit 1, one line, no output (got %d: %s)" % (label, rc, err.strip()))


def store_export(convert, reshard, case, src, workdir):
    """src -> .ckpt -> a store of two resharded steps (3 and 2 shard files, ckpt-reshard) -> safetensors
    (ckpt-convert from the store, a step directory, --step), loaded by the package and compared with src."""
    label = "store %s" % case
    if not os.path.exists(reshard):
        print("skip  %s: ckpt-reshard not built" % label)
        return
    sub = os.path.join(workdir, "store-" + case)
    os.mkdir(sub)
    ckpt, store = os.path.join(sub, case + ".ckpt"), os.path.join(sub, "store")
    rc, _, err = run(convert, src, ckpt)
    if not check(rc == 0, "%s: source converts (%s)" % (label, err.strip())):
        return
    directories = {}
    for step, world in ((7, 3), (9, 2)):
        rc, out, err = run(reshard, ckpt, "-o", store, "--world-size", str(world), "--step", str(step),
                           "--chunk-size", "4096", "--json")
        if not check(rc == 0, "%s: ckpt-reshard writes step %d as %d shards (%s)" % (label, step, world, err.strip())):
            return
        directories[step] = json.loads(out)["directory"]
    original, original_meta = load(src)
    exports = [("latest step", [store], 9), ("--step 7", [store, "--step", "7"], 7),
               ("step directory", [os.path.join(store, directories[7])], 7)]
    for what, args, step in exports:
        dst = os.path.join(sub, "%s-%s.safetensors" % (case, what.replace(" ", "_").replace("-", "")))
        rc, _, err = run(convert, args[0], dst, *args[1:])
        if not check(rc == 0, "%s %s: ckpt-convert exports it (got %d: %s)" % (label, what, rc, err.strip())):
            continue
        again, again_meta = load(dst)
        same = sorted(again) == sorted(original) and all(again[n] == original[n] for n in original if n in again)
        check(same, "%s %s: the package loads the %d tensors saved, same dtypes, shapes and bytes" % (label, what, len(original)))
        expected_meta = dict(original_meta)
        expected_meta["ckpt.step"] = str(step)
        check(again_meta == expected_meta, "%s %s: __metadata__ is the source's plus ckpt.step=%d (got %r)" % (label, what, step, again_meta))
        check_numpy_reader(dst, again, "%s %s" % (label, what))
    missing = os.path.join(sub, "missing.safetensors")
    rc, _, err = run(convert, store, missing, "--step", "8")
    lines = err.strip().splitlines()
    check(rc == 2 and len(lines) == 1 and "no committed step 8" in lines[0] and not os.path.exists(missing),
          "%s: --step 8 (not in the store) exits 2, one line, no output (got %d: %s)" % (label, rc, err.strip()))
    # A flipped data byte in one shard of the latest step: exit 1 naming that shard, and no output.
    shard = os.path.join(store, directories[9], "shard-00000-of-00002.ckpt")
    with open(shard, "r+b") as f:
        f.seek(4096)  # the first piece's data: the default alignment puts it right after the superblock
        byte = f.read(1)
        f.seek(4096)
        f.write(bytes([byte[0] ^ 1]))
    damaged = os.path.join(sub, "damaged.safetensors")
    rc, _, err = run(convert, store, damaged)
    lines = err.strip().splitlines()
    check(rc == 1 and len(lines) == 1 and shard in lines[0] and not os.path.exists(damaged),
          "%s: a damaged shard exits 1 naming it, no output (got %d: %s)" % (label, rc, err.strip()))
    leftovers = [n for n in os.listdir(sub) if ".tmp-" in n]
    check(not leftovers, "%s: no temporary files left (%s)" % (label, leftovers))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bindir = sys.argv[1]
    tools = (os.path.join(bindir, "ckpt-convert"), os.path.join(bindir, "ckpt-verify"))
    if not os.path.exists(tools[0]):
        print("FAIL  %s is not built" % tools[0])
        return 1
    print("safetensors %s, numpy %s" % (safetensors.__version__, np.__version__))
    with tempfile.TemporaryDirectory(prefix="ckpt-interop-") as workdir:
        files = gen_safetensors.corpus(os.path.join(workdir, "corpus"))
        out = os.path.join(workdir, "out")
        os.mkdir(out)
        for case, path in sorted(files.items()):
            # Small chunks and alignment on some cases so tensors straddle many chunks.
            extra = ["--chunk-size", "4096", "--alignment", "64"] if case in ("large", "many", "odd_bytes") else []
            if case in ("large", "non_ascii_names"):
                extra += ["--mmap", "--block-size", "65536"]
            round_trip(tools, case, path, out, extra)
        hostile(tools, files, workdir)
        for case in ("large", "non_ascii_names"):
            store_export(tools[0], os.path.join(bindir, "ckpt-reshard"), case, files[case], workdir)
    print("%d failure(s)" % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
