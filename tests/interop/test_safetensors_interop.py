#!/usr/bin/env python3
"""Interop of ckpt-convert with the reference safetensors implementation (the Python package).

    test_safetensors_interop.py BINARY_DIR

For every file of the generated corpus: safetensors -> ckpt (ckpt-convert), ckpt-verify on the
result, ckpt -> safetensors, then the package loads both files and they must agree on names, dtypes,
shapes, bytes and __metadata__. Files ckpt writes must also load through the package's own reader.
Corrupted files (truncated, bad JSON, ...) must make ckpt-convert exit 2 with a one-line message and
leave no output. A store made by ckpt-reshard (steps of 3 and 2 shard files) is exported by
ckpt-convert (latest step, --step N, a step directory) and the package must load exactly the tensors
of the original safetensors file; a damaged shard is exit 1 with no output. A Hugging Face sharded
set written by the package (save_file per file, the index by hand as save_pretrained writes it) is
converted to one .ckpt and back to a set, which the package loads with the same files, tensors,
bytes and __metadata__; a store's step exports to a set in one command; a weight_map naming a file
outside the directory, or a missing file, is exit 2 with no output. Exit 0 all passed, 1 a check
failed, 77 the Python oracles are not installed.
"""
import json
import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_util import built, check, finish, flip_byte, run, skip, read_safetensors  # noqa: E402

try:
    import numpy as np  # noqa: F401 - the generator needs it
    import safetensors
    from safetensors import safe_open
    from safetensors.numpy import save_file
except ImportError as e:
    skip("Python oracle missing: %s" % e)

import gen_safetensors  # noqa: E402


load = read_safetensors  # what the reference implementation sees: tensors and __metadata__


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
    # The route through one merged file exports the same: ckpt.step, and no ckpt.training_state added.
    merge = os.path.join(os.path.dirname(convert), "ckpt-merge")
    if os.path.exists(merge):
        merged, merged_st = os.path.join(sub, "merged.ckpt"), os.path.join(sub, "merged.safetensors")
        rc, _, err = run(merge, store, "-o", merged)
        if check(rc == 0, "%s: ckpt-merge consolidates the latest step (%s)" % (label, err.strip())):
            rc, _, err = run(convert, merged, merged_st)
            again, again_meta = (load(merged_st) if rc == 0 else ({}, {}))
            expected_meta = dict(original_meta, **{"ckpt.step": "9"})
            check(rc == 0 and again == original and again_meta == expected_meta,
                  "%s: merged then exported without --stringify-metadata: the source's __metadata__ plus ckpt.step=9 only "
                  "(got %d: %s %r)" % (label, rc, err.strip(), again_meta))
    else:
        print("skip  %s merged: ckpt-merge not built" % label)
    missing = os.path.join(sub, "missing.safetensors")
    rc, _, err = run(convert, store, missing, "--step", "8")
    lines = err.strip().splitlines()
    check(rc == 2 and len(lines) == 1 and "no committed step 8" in lines[0] and not os.path.exists(missing),
          "%s: --step 8 (not in the store) exits 2, one line, no output (got %d: %s)" % (label, rc, err.strip()))
    # A flipped data byte in one shard of the latest step: exit 1 naming that shard, and no output.
    shard = os.path.join(store, directories[9], "shard-00000-of-00002.ckpt")
    flip_byte(shard, 4096, 1)  # the first piece's data: the default alignment puts it right after the superblock
    damaged = os.path.join(sub, "damaged.safetensors")
    rc, _, err = run(convert, store, damaged)
    lines = err.strip().splitlines()
    check(rc == 1 and len(lines) == 1 and shard in lines[0] and not os.path.exists(damaged),
          "%s: a damaged shard exits 1 naming it, no output (got %d: %s)" % (label, rc, err.strip()))
    leftovers = [n for n in os.listdir(sub) if ".tmp-" in n]
    check(not leftovers, "%s: no temporary files left (%s)" % (label, leftovers))


INDEX = "model.safetensors.index.json"


def hf_index_text(weight_map, total_size):
    """The index as save_pretrained writes it: json.dumps(index, indent=2, sort_keys=True) + newline."""
    return json.dumps({"metadata": {"total_size": total_size}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"


def write_hf_set(directory, files, metadata):
    """files: [{name: array}] per file. Writes model-0000K-of-0000N.safetensors with save_file and the
    index by hand; returns the weight_map."""
    os.makedirs(directory)
    weight_map, total = {}, 0
    for k, tensors in enumerate(files):
        name = "model-%05d-of-%05d.safetensors" % (k + 1, len(files))
        save_file(tensors, os.path.join(directory, name), metadata=metadata)
        for tensor, array in tensors.items():
            weight_map[tensor] = name
            total += array.nbytes
    with open(os.path.join(directory, INDEX), "w") as f:
        f.write(hf_index_text(weight_map, total))
    return weight_map


def load_set(directory):
    """{file: (tensors, metadata)} of every file the index names, and the index."""
    with open(os.path.join(directory, INDEX)) as f:
        text = f.read()
    index = json.loads(text)
    files = {name: load(os.path.join(directory, name)) for name in sorted(set(index["weight_map"].values()))}
    return files, index, text


def hf_sets(convert, verify, reshard, workdir):
    """A sharded set made by the package: set -> .ckpt -> set, compared file by file; hostile indexes."""
    sub = os.path.join(workdir, "hf")
    os.mkdir(sub)
    rng = np.random.default_rng(11)
    # Data bytes per file 4000, 3000, 2500: with --max-shard-size 4KiB (4096) the split is the same.
    files = [
        {"model.embed_tokens.weight": rng.standard_normal(1000).astype(np.float32)},
        {"model.layers.0.w": rng.standard_normal(1000).astype(np.float16),
         "model.layers.0.idx": rng.integers(-9, 9, 100).astype(np.int64),
         "model.layers.0.mask": rng.integers(0, 2, 200).astype(np.bool_)},
        {"lm_head.weight": rng.standard_normal((30, 10)).astype(np.float64),
         "lm_head.bias": rng.integers(0, 255, 100).astype(np.uint8)},
    ]
    metadata = {"format": "pt"}
    src = os.path.join(sub, "src")
    weight_map = write_hf_set(src, files, metadata)
    original, original_index, _ = load_set(src)
    ckpt = os.path.join(sub, "model.ckpt")
    rc, out, err = run(convert, os.path.join(src, INDEX), ckpt, "--json", "--chunk-size", "4096")
    if not check(rc == 0, "hf set: index -> ckpt exits 0 (got %d: %s)" % (rc, err.strip())):
        return
    summary = json.loads(out)
    check(summary["tensors"] == len(weight_map) and summary["bytes"] == original_index["metadata"]["total_size"],
          "hf set: --json counts %d tensors, total_size bytes" % len(weight_map))
    rc, _, err = run(convert, src, os.path.join(sub, "from-dir.ckpt"))
    check(rc == 0, "hf set: the directory holding the index converts too (got %d: %s)" % (rc, err.strip()))
    if os.path.exists(verify):
        rc, out, err = run(verify, ckpt)
        check(rc == 0, "hf set: ckpt-verify passes the converted file (got %d: %s)" % (rc, (out + err).strip()))
    back = os.path.join(sub, "back")
    rc, out, err = run(convert, ckpt, os.path.join(back, INDEX), "--max-shard-size", "4KiB", "--json")
    if not check(rc == 0, "hf set: ckpt -> set exits 0 (got %d: %s)" % (rc, err.strip())):
        return
    again, again_index, again_text = load_set(back)
    check(again_index == original_index, "hf set: same index (total_size, weight_map: the same 3-file split) (got %r)" % again_index)
    check(again_text == hf_index_text(again_index["weight_map"], again_index["metadata"]["total_size"]),
          "hf set: index text as save_pretrained writes it (indent 2, sorted keys, final newline)")
    check(sorted(again) == sorted(original), "hf set: the same file names")
    for name in original:
        if name not in again:
            continue
        check(again[name][0] == original[name][0], "hf set: %s keeps its tensors' dtypes, shapes and bytes" % name)
        check(again[name][1] == original[name][1] == metadata, "hf set: %s keeps __metadata__ %r exactly" % (name, metadata))
        check_numpy_reader(os.path.join(back, name), again[name][0], "hf set " + name)
    leftovers = [n for n in os.listdir(back) if ".tmp-" in n]
    check(not leftovers and len(os.listdir(back)) == 4, "hf set: 3 files and the index, no temporaries (%s)" % os.listdir(back))
    rc, _, err = run(convert, ckpt, os.path.join(back, INDEX))
    check(rc == 2 and "already exists" in err, "hf set: an existing index is not replaced without --force (got %d: %s)" % (rc, err.strip()))
    # One file of the default size (5GB) holds everything.
    one = os.path.join(sub, "one")
    rc, _, err = run(convert, ckpt, os.path.join(one, INDEX))
    files_one, index_one, _ = load_set(one) if rc == 0 else ({}, {}, "")
    check(rc == 0 and list(files_one) == ["model-00001-of-00001.safetensors"] and len(index_one["weight_map"]) == len(weight_map),
          "hf set: the default max shard size writes one file (got %d: %s)" % (rc, err.strip()))

    # A store's multi-rank step exports to a set in one command: __metadata__ plus ckpt.step.
    if os.path.exists(reshard):
        store = os.path.join(sub, "store")
        rc, _, err = run(reshard, ckpt, "-o", store, "--world-size", "3", "--step", "5", "--chunk-size", "4096")
        if check(rc == 0, "hf set: ckpt-reshard writes a 3-shard step (%s)" % err.strip()):
            from_store = os.path.join(sub, "from-store")
            rc, _, err = run(convert, store, os.path.join(from_store, INDEX), "--max-shard-size", "4KiB")
            if check(rc == 0, "hf set: the store's step exports to a set in one command (got %d: %s)" % (rc, err.strip())):
                exported, exported_index, _ = load_set(from_store)
                check(exported_index == original_index, "hf set: the step's set has the original index")
                expected = dict(metadata, **{"ckpt.step": "5"})
                check(all(exported[n][0] == original[n][0] and exported[n][1] == expected for n in original if n in exported)
                      and sorted(exported) == sorted(original),
                      "hf set: each file of the step's set holds the original tensors, __metadata__ plus ckpt.step=5 only")
    else:
        print("skip  hf set store export: ckpt-reshard not built")

    # Hostile indexes: exit 2, one line naming the index or file, nothing written.
    def hostile_set(label, edit):
        d = os.path.join(sub, "hostile-" + label.replace(" ", "_").replace("/", "_").replace(".", "_"))
        shutil.copytree(src, d)
        edit(d)
        out_path = os.path.join(sub, label.replace(" ", "_").replace("/", "_").replace(".", "_") + ".ckpt")
        rc, _, err = run(convert, os.path.join(d, INDEX), out_path)
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and d in lines[0] and not os.path.exists(out_path),
              "hf set hostile %s: exit 2, one line naming the set, no output (got %d: %s)" % (label, rc, err.strip()))

    def rewrite_map(change):
        def edit(d):
            m = dict(weight_map)
            change(m)
            with open(os.path.join(d, INDEX), "w") as f:
                f.write(hf_index_text(m, 1))
        return edit

    shutil.copy(os.path.join(src, "model-00001-of-00003.safetensors"), os.path.join(sub, "outside.safetensors"))
    hostile_set("file outside the directory", rewrite_map(lambda m: m.update({"model.embed_tokens.weight": "../outside.safetensors"})))
    hostile_set("absolute file name", rewrite_map(lambda m: m.update({"model.embed_tokens.weight": os.path.join(sub, "outside.safetensors")})))
    hostile_set("missing file", lambda d: os.remove(os.path.join(d, "model-00002-of-00003.safetensors")))
    hostile_set("tensor not in its file", rewrite_map(lambda m: m.update({"ghost": "model-00001-of-00003.safetensors"})))
    hostile_set("tensor in two files", lambda d: save_file(dict(files[1], **{"lm_head.bias": files[2]["lm_head.bias"]}),
                                                           os.path.join(d, "model-00002-of-00003.safetensors"), metadata=metadata))
    hostile_set("malformed index", lambda d: open(os.path.join(d, INDEX), "w").write('{"weight_map": {'))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bindir = sys.argv[1]
    tools = (os.path.join(bindir, "ckpt-convert"), os.path.join(bindir, "ckpt-verify"))
    if not built(tools[0]):
        return finish()
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
        hf_sets(tools[0], tools[1], os.path.join(bindir, "ckpt-reshard"), workdir)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
