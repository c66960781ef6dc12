#!/usr/bin/env python3
"""Checkpoint identity against independent implementations (spec/IDENTITY.md, spec/FOREIGN.md 2-3).

    test_identity_interop.py BINARY_DIR

- The root digest is recomputed here from the spec alone, with the `xxhash` package over the bytes
  the `safetensors` package returns, and must equal what ckpt-verify --write-sidecar records and
  ckpt-inspect shows for the safetensors file, for the .ckpt ckpt-convert makes of it, and for a
  Hugging Face sharded set (files by the package, index as save_pretrained writes it).
- Sidecars: damaged copies are caught (a flipped data byte names its tensor and chunk, a flipped
  header byte, a truncated copy, a missing shard of a set); an intact file without a sidecar is
  "structure ok", never damaged; the checkpoint's bytes are never modified.
- Pins: --expect with the right and a wrong digest, --expect-file as text and as ckpt-inspect --json
  (names the differing tensor), a store's step.
- Diffs against what is known to differ: one chunk of one tensor, one tensor's dtype, an added and
  a removed tensor, a metadata value, and nothing (the same content saved in another order).
Exit 0 all passed, 1 a check failed, 77 the Python oracles are not installed.
"""
import json
import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_util import check, file_sha256, finish, flip_byte, run, run_json, skip  # noqa: E402

try:
    import numpy as np
    import xxhash
    import safetensors
    from safetensors.numpy import save_file
except ImportError as e:
    skip("Python oracle missing: %s" % e)

CHUNK = 1 << 20


# --- spec/IDENTITY.md 2, independently -------------------------------------------------------------

def u64(v):
    return struct.pack("<Q", v)


def string(b):
    return u64(len(b)) + b


def digest128(data):
    d = xxhash.xxh3_128_digest(data)  # canonical: big-endian, high half first
    high, low = struct.unpack(">QQ", d)
    return u64(high) + u64(low), d.hex()


def tensor_digest(name, dtype, shape, data):
    """One whole piece (offsets zero), chunks of CHUNK bytes: spec 2.2."""
    chunks = [xxhash.xxh3_64_intdigest(data[i:i + CHUNK]) for i in range(0, len(data), CHUNK)]
    e = b"CKPTTNSR" + struct.pack("<I", 1) + string(name.encode()) + string(dtype.encode())
    e += u64(len(shape)) + b"".join(u64(d) for d in shape) + u64(1)
    e += u64(len(shape)) + b"".join(u64(0) for _ in shape) + b"".join(u64(d) for d in shape)
    e += u64(len(data)) + u64(CHUNK) + u64(len(chunks)) + b"".join(u64(c) for c in chunks)
    return digest128(e)


def root_digest(tensors, metadata):
    """tensors: {name: (dtype, shape, bytes)}; metadata: {key: text} (type 4, string): spec 2.3, 2.4."""
    names = sorted(tensors, key=lambda n: n.encode())
    m = b"CKPTMETA" + struct.pack("<I", 1) + u64(len(metadata))
    for k in sorted(metadata, key=lambda k: k.encode()):
        m += string(k.encode()) + u64(4) + string(metadata[k].encode())
    meta_raw, _ = digest128(m)
    r = b"CKPTROOT" + struct.pack("<I", 1) + u64(len(names))
    for n in names:
        r += tensor_digest(n, *tensors[n])[0]
    r += meta_raw
    return digest128(r)[1]


def reference_view(path):
    """What the safetensors package sees in a file: {name: (dtype, shape, bytes)}, __metadata__."""
    with open(path, "rb") as f:
        content = f.read()
    tensors = {n: (v["dtype"], list(v["shape"]), bytes(v["data"])) for n, v in safetensors.deserialize(content)}
    (n,) = struct.unpack("<Q", content[:8])
    metadata = json.loads(content[8:8 + n]).get("__metadata__", {})
    return tensors, metadata


def data_offset(path, name):
    """Absolute file offset of a tensor's first byte, from the header as the package's format defines it."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return 8 + n + header[name]["data_offsets"][0]


def main():
    bindir = sys.argv[1]
    inspect = os.path.join(bindir, "ckpt-inspect")
    verify = os.path.join(bindir, "ckpt-verify")
    diff = os.path.join(bindir, "ckpt-diff")
    convert = os.path.join(bindir, "ckpt-convert")
    tmp = tempfile.mkdtemp(prefix="ckpt-identity-")
    rng = np.random.default_rng(12)
    try:
        base = {
            "model.embed.weight": rng.standard_normal((1024, 640)).astype(np.float32),  # 2.5 MiB: 3 chunks
            "model.layers.0.weight": rng.standard_normal((512, 512)).astype(np.float32),
            "model.layers.0.bias": np.arange(512, dtype=np.float32),
            "model.norm": rng.standard_normal((7, 3, 5)).astype(np.float16),
            "step": np.array(42, dtype=np.int64),
            "empty": np.zeros((0, 4), dtype=np.float32),
        }
        meta = {"format": "pt", "note": "identity test"}
        st = os.path.join(tmp, "model.safetensors")
        save_file(base, st, metadata=meta)
        before = file_sha256(st)

        # An intact file without a sidecar: structure ok, never damaged; no root recorded yet.
        rc, doc, err = run_json(verify, "--json", st)
        check(rc == 0 and doc and doc["ok"] and doc["foreign"][0]["data_checked"] is False,
              "ckpt-verify: an intact safetensors file without a sidecar is exit 0, data not checked (%d %s)" % (rc, err.strip()))
        rc, out, _ = run(verify, st)
        check(rc == 0 and "structure ok" in out and "DAMAGED" not in out, "ckpt-verify says plainly that the data carries no digests")
        rc, doc, _ = run_json(inspect, "--json", st)
        ref_tensors, ref_meta = reference_view(st)
        check(rc == 0 and doc["format"] == "safetensors" and doc["root_digest"] is None, "ckpt-inspect: format, no root without a sidecar")
        seen = {t["name"]: (t["dtype"], t["shape"], t["bytes"]) for t in doc["tensors"]}
        check(seen == {n: (d, s, len(b)) for n, (d, s, b) in ref_tensors.items()},
              "ckpt-inspect shows every tensor with the package's dtype, shape and size")
        check(doc["metadata"] == ref_meta, "ckpt-inspect shows __metadata__")

        # The sidecar's root digest is the one recomputed here from the spec.
        expected_root = root_digest(ref_tensors, ref_meta)
        rc, doc, err = run_json(verify, "--write-sidecar", "--json", st)
        check(rc == 0 and doc["sidecars"][0]["root_digest"] == expected_root,
              "--write-sidecar: root digest equals the independent computation (%s)" % expected_root)
        check(file_sha256(st) == before, "--write-sidecar leaves the safetensors file byte-identical")
        check(os.path.exists(st + ".ckptsum"), "the sidecar lies beside the file, named FILE.ckptsum")
        rc, doc, _ = run_json(inspect, "--json", st)
        check(doc["root_digest"] == expected_root, "ckpt-inspect shows the sidecar's root digest")
        rc, doc, _ = run_json(verify, "--json", st)
        check(rc == 0 and doc["foreign"][0]["data_checked"] is True and doc["foreign"][0]["bytes_checked"] == os.path.getsize(st),
              "ckpt-verify with a sidecar checks every byte of the file")

        # The .ckpt made of it has the same identity (same chunk size, same content).
        ck = os.path.join(tmp, "model.ckpt")
        rc, _, err = run(convert, st, ck)
        check(rc == 0, "ckpt-convert safetensors -> ckpt (%s)" % err.strip())
        rc, out, _ = run(inspect, "--pin", ck)
        check(rc == 0 and out.split()[0] == expected_root, "the converted .ckpt has the same root digest (%s)" % out.strip())
        rc, out, _ = run(diff, st, ck)
        check(rc == 0, "ckpt-diff safetensors vs its .ckpt: identical (exit 0)")

        # Damaged copies, caught through the sidecar.
        def copy(name):
            p = os.path.join(tmp, name)
            shutil.copyfile(st, p)
            shutil.copyfile(st + ".ckptsum", p + ".ckptsum")
            return p

        d = copy("flipped.safetensors")
        target = data_offset(d, "model.embed.weight") + CHUNK + 12345  # chunk 1 of the tensor
        flip_byte(d, target, 0x40)
        rc, doc, _ = run_json(verify, "--json", d)
        probs = doc["foreign"][0]["problems"] if doc else []
        check(rc == 1 and len(probs) == 1 and probs[0]["tensor"] == "model.embed.weight" and probs[0]["chunk"] == 1 and
              probs[0]["offset"] <= target < probs[0]["offset"] + probs[0]["length"] and probs[0]["region"] == "data",
              "a flipped data byte: exit 1 naming the tensor, chunk 1 and a byte range holding it")
        h = copy("header.safetensors")
        flip_byte(h, 20, 0x40)  # inside the JSON header
        rc, doc, _ = run_json(verify, "--json", h)
        check(rc == 1 and any(p["region"] == "header" and p["offset"] == 0 for p in doc["foreign"][0]["problems"]),
              "a flipped header byte: exit 1, header bytes damaged")
        t = copy("truncated.safetensors")
        with open(t, "r+b") as f:
            f.truncate(os.path.getsize(st) - 1000)
        rc, doc, _ = run_json(verify, "--json", t)
        check(rc == 1 and any(p["code"] == "incomplete" for p in doc["foreign"][0]["problems"]), "a truncated copy: exit 1, incomplete")
        u = os.path.join(tmp, "truncated-no-sidecar.safetensors")
        shutil.copyfile(t, u)
        rc, _, _ = run(verify, u)
        check(rc == 1, "a truncated copy without a sidecar: exit 1 from the header's offsets alone")

        # Pins.
        rc, _, _ = run(verify, "--expect", expected_root, st, ck)
        check(rc == 0, "--expect the right digest: exit 0 for the safetensors file and its .ckpt")
        wrong = ("0" if expected_root[0] != "0" else "1") + expected_root[1:]
        rc, out, _ = run(verify, "--expect", wrong, ck)
        check(rc == 1 and "NOT THE PINNED" in out, "--expect another digest: exit 1, not the pinned checkpoint")
        pin_json = os.path.join(tmp, "pin.json")
        with open(pin_json, "w") as f:
            f.write(run(inspect, "--json", ck)[1])
        tuned = dict(base)
        tuned["model.layers.0.weight"] = base["model.layers.0.weight"].copy()
        tuned["model.layers.0.weight"][3, 7] += 1.0
        tuned_st = os.path.join(tmp, "tuned.safetensors")
        save_file(tuned, tuned_st, metadata=meta)
        tuned_ck = os.path.join(tmp, "tuned.ckpt")
        run(convert, tuned_st, tuned_ck)
        rc, doc, _ = run_json(verify, "--json", "--expect-file", pin_json, tuned_ck)
        check(rc == 1 and doc["pins"][0]["tensors_changed"] == ["model.layers.0.weight"] and doc["ok"] is False,
              "--expect-file (ckpt-inspect --json): exit 1 naming the one tensor that differs")
        pin_txt = os.path.join(tmp, "pins.txt")
        with open(pin_txt, "w") as f:
            f.write("# pinned models\n%s  %s\n%s  %s\n" % (expected_root, ck, run(inspect, "--pin", tuned_ck)[1].split()[0], tuned_ck))
        rc, _, err = run(verify, "--expect-file", pin_txt, ck, tuned_ck)
        check(rc == 0, "--expect-file with text lines DIGEST  PATH, one per checkpoint: exit 0 (%s)" % err.strip())
        junit = os.path.join(tmp, "pins.xml")
        rc, _, _ = run(verify, "--expect", expected_root, "--junit", junit, tuned_ck)
        check(rc == 1 and "not the pinned checkpoint" in open(junit).read(), "--junit records the unmatched pin as a failure")

        # Diffs against what is known to differ.
        rc, doc, _ = run_json(diff, "--json", ck, tuned_ck)
        ch = doc["tensors"] if doc else []
        check(rc == 1 and len(ch) == 1 and ch[0]["name"] == "model.layers.0.weight" and ch[0]["chunks_comparable"] and
              [c["chunk"] for c in ch[0]["chunks"]] == [0] and doc["data_read"] is False,
              "ckpt-diff: one tensor, one chunk differs, from digests alone")
        cast = dict(base)
        cast["model.layers.0.bias"] = base["model.layers.0.bias"].astype(np.float16)
        cast_st = os.path.join(tmp, "cast.safetensors")
        save_file(cast, cast_st, metadata=meta)
        run(verify, "--write-sidecar", cast_st)
        rc, doc, _ = run_json(diff, "--json", st, cast_st)
        ch = doc["tensors"] if doc else []
        check(rc == 1 and len(ch) == 1 and ch[0]["name"] == "model.layers.0.bias" and ch[0]["dtype_changed"] and
              ch[0]["a"]["dtype"] == "F32" and ch[0]["b"]["dtype"] == "F16" and ch[0]["bytes_changed"],
              "ckpt-diff: a dtype change is named, with its byte count")
        reordered = {k: base[k] for k in reversed(list(base))}
        same_st = os.path.join(tmp, "same.safetensors")
        save_file(reordered, same_st, metadata=meta)
        rc, doc, err = run_json(diff, "--json", st, same_st)
        check(rc == 0 and doc["identical"] and doc["data_read"] is True, "ckpt-diff: the same content saved in another order is identical")
        changed = dict(base)
        del changed["empty"]
        changed["extra"] = np.ones(3, dtype=np.int32)
        other_st = os.path.join(tmp, "other.safetensors")
        save_file(changed, other_st, metadata={"format": "pt", "note": "changed"})
        rc, doc, _ = run_json(diff, "--json", st, other_st)
        kinds = {t["name"]: t["change"] for t in doc["tensors"]} if doc else {}
        check(rc == 1 and kinds == {"empty": "removed", "extra": "added"} and [m["key"] for m in doc["metadata"]] == ["note"],
              "ckpt-diff: an added and a removed tensor and a changed metadata value")
        rc, doc, _ = run_json(diff, "--json", "--tensors", "model.embed*", ck, tuned_ck)
        check(rc == 0 and doc["identical"], "ckpt-diff --tensors: the frozen embedding was not touched")

        # A store's step: pinned through the store (latest or --step) and as its step directory.
        reshard = os.path.join(bindir, "ckpt-reshard")
        store = os.path.join(tmp, "store")
        rc, _, err = run(reshard, ck, "-o", store, "--world-size", "2", "--step", "7")
        check(rc == 0, "ckpt-reshard model.ckpt into a 2-rank step of a store (%s)" % err.strip())
        rc, doc, _ = run_json(inspect, "--json", "--latest", store)
        step_root = doc["root_digest"] if doc else None
        step_dir = os.path.join(store, doc["step"]["dir"]) if doc else store
        rc, _, _ = run(verify, "--expect", step_root, store)
        check(rc == 0, "--expect the step's root on the store: exit 0")
        rc, _, _ = run(verify, "--expect", step_root, "--step", "7", store)
        check(rc == 0, "--expect with --step 7: exit 0")
        rc, out, _ = run(inspect, "--pin", step_dir)
        check(rc == 0 and out.split()[0] == step_root, "the step directory has the root its store shows")
        rc, doc, _ = run_json(diff, "--json", ck, store)
        ch = {t["name"]: t for t in doc["tensors"]} if doc else {}
        split = ch.get("model.embed.weight")
        check(rc == 1 and split is not None and not split["chunks_comparable"] and not split["dtype_changed"] and
              not split["shape_changed"] and any(m["key"] == "ckpt.training_state" for m in doc["metadata"]),
              "ckpt-diff file vs its 2-rank reshard: split tensors differ in layout (chunks not comparable), step state added")

        # A Hugging Face sharded set: files by the package, the index as save_pretrained writes it.
        hf = os.path.join(tmp, "hf")
        os.mkdir(hf)
        names = sorted(base)
        parts = [names[:3], names[3:]]
        weight_map, total = {}, 0
        for i, part in enumerate(parts):
            fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(parts))
            save_file({n: base[n] for n in part}, os.path.join(hf, fname), metadata={"format": "pt"})
            for n in part:
                weight_map[n] = fname
                total += base[n].nbytes
        index = os.path.join(hf, "model.safetensors.index.json")
        with open(index, "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        rc, doc, err = run_json(inspect, "--json", hf)
        check(rc == 0 and doc["format"] == "safetensors-index" and len(doc["tensors"]) == len(base) and len(doc["files"]) == 3,
              "ckpt-inspect on a Hugging Face set directory: every tensor, the index and both files (%s)" % err.strip())
        rc, out, err = run(verify, hf)
        check(rc == 0 and "structure ok" in out, "ckpt-verify on the set: structure ok, no digests")
        rc, doc, err = run_json(verify, "--write-sidecar", "--json", index)
        hf_meta = {"format": "pt", "total_size": str(total)}
        check(rc == 0 and doc["sidecars"][0]["root_digest"] == root_digest(ref_tensors, hf_meta),
              "the set's root digest equals the independent computation (its tensors, __metadata__ and total_size)")
        check(os.path.exists(index + ".ckptsum"), "the set's sidecar is INDEX.ckptsum")
        rc, _, _ = run(verify, hf)
        check(rc == 0, "ckpt-verify on the set with its sidecar: exit 0")
        shard2 = os.path.join(hf, "model-00002-of-00002.safetensors")
        saved = open(shard2, "rb").read()
        name2 = parts[1][0]
        flip_byte(shard2, data_offset(shard2, name2) + 1, 0x40)
        rc, doc, _ = run_json(verify, "--json", hf)
        probs = doc["foreign"][0]["problems"] if doc else []
        check(rc == 1 and any(p["tensor"] == name2 and p["file"].endswith("model-00002-of-00002.safetensors") for p in probs),
              "a flipped byte in the second file of the set names its tensor and file")
        os.remove(shard2)
        rc, doc, _ = run_json(verify, "--json", hf)
        check(rc == 1 and doc["foreign"][0]["problems"], "a missing file of the set: exit 1")
        with open(shard2, "wb") as f:
            f.write(saved)
        rc, _, _ = run(verify, hf)
        check(rc == 0, "restored: the set verifies again")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
