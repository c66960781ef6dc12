#!/usr/bin/env python3
"""Interop of ckpt's GGUF reader with the gguf Python package (llama.cpp's gguf-py).

    test_gguf_interop.py BINARY_DIR

GGUF files written by gguf.GGUFWriter (F32, F16, integer types, Q8_0 through gguf.quants.quantize,
a custom alignment, metadata of every kind including string arrays) are described by
`ckpt-inspect --json`, which must agree with gguf.GGUFReader on every tensor's name, type, shape
(row-major: the reverse of GGUF's dimensions), data offset and byte count, and on the metadata, and
report no problems. `ckpt-verify --json` passes them (structure only, no sidecar);
`ckpt-verify --write-sidecar` records their digests; a copy with one data byte flipped then fails
(exit 1) naming that tensor, and a truncated copy fails (exit 1). Exit 0 all passed, 1 a check
failed, 77 the gguf package is not installed.
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_util import built, check, finish, flip_byte, run, run_json, skip  # noqa: E402

try:
    import numpy as np
    import gguf
except ImportError as e:
    skip("Python oracle missing: %s" % e)


def write_gguf(path, tensors, metadata, alignment=None):
    """tensors: [(name, array, raw_dtype or None)] in data order; metadata: [(kind, key, value)]."""
    w = gguf.GGUFWriter(path, arch="llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for kind, key, value in metadata:
        getattr(w, "add_" + kind)(key, value)
    for name, array, raw_dtype in tensors:
        if raw_dtype is None:
            w.add_tensor(name, array)
        else:
            w.add_tensor(name, array, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def corpus(directory):
    """{case: path} of GGUF files written by the package."""
    rng = np.random.default_rng(7)
    files = {}
    tokens = ["<s>", "</s>", "hello", "wor\"ld", "\u00e9t\u00e9", "\n"] + ["tok%d" % i for i in range(200)]
    common = [
        ("string", "general.name", "ckpt interop"),
        ("uint32", "llama.context_length", 4096),
        ("uint64", "t.big", 1 << 40),
        ("int32", "t.negative", -12),
        ("float32", "llama.rope.freq_base", 10000.0),
        ("float64", "t.f64", 0.25),
        ("bool", "t.flag", True),
        ("uint8", "t.u8", 200),
        ("int16", "t.i16", -300),
        ("array", "tokenizer.ggml.tokens", tokens),
        ("array", "tokenizer.ggml.scores", [float(i) / 4 for i in range(len(tokens))]),
        ("array", "t.small", [1, 2, 3]),
        ("array", "t.nested", [[1, 2], [3]]),
    ]
    path = os.path.join(directory, "plain.gguf")
    write_gguf(path, [
        ("token_embd.weight", rng.standard_normal((6, 4)).astype(np.float32), None),
        ("blk.0.attn_norm.weight", rng.standard_normal(10).astype(np.float16), None),
        ("blk.0.cube", rng.standard_normal((2, 3, 5)).astype(np.float32), None),
        ("blk.0.ids", rng.integers(-100, 100, 7).astype(np.int32), None),
        ("blk.0.i8", rng.integers(-100, 100, 9).astype(np.int8), None),
        ("blk.0.i16", rng.integers(-100, 100, 3).astype(np.int16), None),
        ("blk.0.i64", rng.integers(-100, 100, 5).astype(np.int64), None),
        ("blk.0.f64", rng.standard_normal((3, 3)).astype(np.float64), None),
    ], common)
    files["plain"] = path
    quantize = getattr(getattr(gguf, "quants", None), "quantize", None)
    if quantize is not None:
        path = os.path.join(directory, "q8_0.gguf")
        weight = rng.standard_normal((4, 64)).astype(np.float32)
        write_gguf(path, [
            ("blk.0.ffn_down.weight", quantize(weight, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0),
            ("blk.0.ffn_down.bias", rng.standard_normal(4).astype(np.float32), None),
            ("output.weight", quantize(rng.standard_normal((3, 96)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0),
             gguf.GGMLQuantizationType.Q8_0),
        ], common + [("uint32", "general.quantization_version", 2)])
        files["q8_0"] = path
    else:
        print("skip  q8_0: this gguf package has no gguf.quants.quantize")
    path = os.path.join(directory, "aligned64.gguf")
    write_gguf(path, [("w%02d" % i, rng.standard_normal(1 + 3 * i).astype(np.float32 if i % 2 else np.float16), None)
                      for i in range(12)], [("string", "general.name", "odd sizes")], alignment=64)
    files["aligned64"] = path
    return files


def expected_text(field):
    """What ckpt's metadata text must be for the fields it is simple to predict (spec/FOREIGN.md 5.5)."""
    types = field.types
    if not types:
        return None
    if types[0] == gguf.GGUFValueType.STRING:
        return field.contents()
    if types[0] == gguf.GGUFValueType.BOOL:
        return "true" if field.contents() else "false"
    if types[0] in (gguf.GGUFValueType.UINT8, gguf.GGUFValueType.INT8, gguf.GGUFValueType.UINT16, gguf.GGUFValueType.INT16,
                    gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32, gguf.GGUFValueType.UINT64, gguf.GGUFValueType.INT64):
        return str(int(field.contents()))
    if types[0] == gguf.GGUFValueType.ARRAY and len(types) == 2 and types[1] in (gguf.GGUFValueType.INT32, gguf.GGUFValueType.UINT32):
        items = field.contents()
        if len(items) <= 16:
            return "[%d x %s: %s]" % (len(items), "i32" if types[1] == gguf.GGUFValueType.INT32 else "u32",
                                      ", ".join(str(i) for i in items))
    return None


def compare(inspect, case, path):
    reader = gguf.GGUFReader(path)
    rc, out, err = run(inspect, "--json", path)
    if not check(rc == 0, "%s: ckpt-inspect --json exits 0 (got %d: %s)" % (case, rc, err.strip())):
        return
    report = json.loads(out)
    check(report.get("kind") == "foreign" and report.get("format") == "gguf", "%s: described as a foreign gguf checkpoint" % case)
    check(report.get("problems") == [], "%s: no problems (got %r)" % (case, report.get("problems")))
    files = report.get("files", [])
    check(len(files) == 1 and files[0]["name"] == os.path.basename(path) and files[0]["size"] == os.path.getsize(path),
          "%s: one file, its name and size" % case)
    ours = {t["name"]: t for t in report.get("tensors", [])}
    theirs = {t.name: t for t in reader.tensors}
    check(sorted(ours) == sorted(theirs), "%s: the same %d tensor names" % (case, len(theirs)))
    check([t["name"] for t in report.get("tensors", [])] == sorted(ours), "%s: tensors sorted by name" % case)
    for name, t in sorted(theirs.items()):
        if name not in ours:
            continue
        mine = ours[name]
        shape = [int(d) for d in reversed(list(t.shape))]
        pieces = mine.get("pieces", [])
        same = (mine["dtype"] == t.tensor_type.name and mine["shape"] == shape and mine["bytes"] == int(t.n_bytes)
                and len(pieces) == 1 and pieces[0]["file"] == os.path.basename(path)
                and pieces[0]["offset"] == int(t.data_offset) and pieces[0]["length"] == int(t.n_bytes)
                and pieces[0]["offsets"] == [0] * len(shape) and pieces[0]["shape"] == shape)
        check(same, "%s: %s is %s %s at offset %d, %d bytes, as GGUFReader reads it (ckpt: %s)"
              % (case, name, t.tensor_type.name, shape, int(t.data_offset), int(t.n_bytes), json.dumps(mine)))
    metadata = report.get("metadata", {})
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    check(sorted(metadata) == sorted(fields), "%s: the same %d metadata keys (got %s)" % (case, len(fields), sorted(metadata)))
    for key, field in sorted(fields.items()):
        want = expected_text(field)
        if want is not None and key in metadata:
            check(metadata[key] == want, "%s: metadata %s reads %r (got %r)" % (case, key, want, metadata[key]))
    tokens = metadata.get("tokenizer.ggml.tokens", "")
    if "tokenizer.ggml.tokens" in fields:
        check(tokens.startswith("array of %d string, xxh3-64 " % len(fields["tokenizer.ggml.tokens"].data)),
              "%s: the token list is summarised (%r)" % (case, tokens))


def verify_json(verify, path):
    rc, report, err = run_json(verify, "--json", path)
    return rc, report if report is not None else {}, err


def foreign_problems(report):
    return [p for f in report.get("foreign", []) for p in f.get("problems", [])]


def damage(verify, case, path, workdir):
    rc, report, err = verify_json(verify, path)
    foreign = report.get("foreign", [])
    check(rc == 0 and report.get("ok") is True and len(foreign) == 1 and foreign[0].get("format") == "gguf"
          and foreign[0].get("ok") is True and foreign[0].get("data_checked") is False,
          "%s: ckpt-verify --json passes the structure, data not checked without a sidecar (got %d: %s %s)"
          % (case, rc, json.dumps(report), err.strip()))

    rc, out, err = run(verify, "--write-sidecar", path)
    sidecar = path + ".ckptsum"
    if not check(rc == 0 and os.path.exists(sidecar), "%s: ckpt-verify --write-sidecar writes %s (got %d: %s)"
                 % (case, os.path.basename(sidecar), rc, (out + err).strip())):
        return
    rc, report, err = verify_json(verify, path)
    foreign = report.get("foreign", [])
    check(rc == 0 and len(foreign) == 1 and foreign[0].get("data_checked") is True and foreign[0].get("sidecar"),
          "%s: with its sidecar, ckpt-verify checks the data and passes (got %d: %s)" % (case, rc, json.dumps(report)))

    # One flipped byte in the middle of the largest tensor, in a copy beside its copied sidecar.
    reader = gguf.GGUFReader(path)
    victim = max(reader.tensors, key=lambda t: (int(t.n_bytes), t.name))
    sub = os.path.join(workdir, case + "-flipped")
    os.mkdir(sub)
    copy = os.path.join(sub, os.path.basename(path))
    shutil.copy(path, copy)
    shutil.copy(sidecar, copy + ".ckptsum")
    at = int(victim.data_offset) + int(victim.n_bytes) // 2
    flip_byte(copy, at, 0x10)
    rc, report, err = verify_json(verify, copy)
    named = [p for p in foreign_problems(report) if p.get("tensor") == victim.name]
    check(rc == 1 and report.get("ok") is False and named,
          "%s: a byte flipped at offset %d is damage to tensor %s (got %d: %s %s)"
          % (case, at, victim.name, rc, json.dumps(foreign_problems(report)), err.strip()))

    # A truncated copy (no sidecar): its last tensor's data is past the end.
    sub = os.path.join(workdir, case + "-truncated")
    os.mkdir(sub)
    copy = os.path.join(sub, os.path.basename(path))
    last = max(reader.tensors, key=lambda t: int(t.data_offset) + int(t.n_bytes))
    with open(path, "rb") as f:
        content = f.read()
    cut = int(last.data_offset) + max(int(last.n_bytes) // 2, 1) - 1
    with open(copy, "wb") as f:
        f.write(content[:cut])
    rc, report, err = verify_json(verify, copy)
    problems = foreign_problems(report)
    check(rc == 1 and any(p.get("code") == "incomplete" for p in problems),
          "%s: a copy truncated at %d of %d bytes fails as incomplete (got %d: %s %s)"
          % (case, cut, len(content), rc, json.dumps(problems), err.strip()))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bindir = sys.argv[1]
    inspect, verify = os.path.join(bindir, "ckpt-inspect"), os.path.join(bindir, "ckpt-verify")
    if not built(inspect, verify):
        return finish()
    print("gguf %s, numpy %s" % (getattr(gguf, "__version__", "(version unknown)"), np.__version__))
    with tempfile.TemporaryDirectory(prefix="ckpt-gguf-interop-") as workdir:
        corpus_dir = os.path.join(workdir, "corpus")
        os.mkdir(corpus_dir)
        files = corpus(corpus_dir)
        for case, path in sorted(files.items()):
            compare(inspect, case, path)
        for case, path in sorted(files.items()):
            damage(verify, case, path, workdir)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
