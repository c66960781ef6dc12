#!/usr/bin/env python3
"""Interop of ckpt-inspect / ckpt-verify with PyTorch Distributed Checkpoint (the independent implementation).

    test_dcp_interop.py BINARY_DIR

torch.distributed.checkpoint.save writes two checkpoints: one process (float32, bfloat16, int64
tensors, an int, a BytesIO and a list in a nested dict), and two gloo ranks (DTensors sharded on dim 0
and on dim 1, so a tensor has several chunks in several files, a replicated tensor, an int). For each,
`ckpt-inspect --json DIR` must report exactly the tensors, dtypes, shapes, chunks (offsets, sizes) and
item byte ranges that dcp's own FileSystemReader(DIR).read_metadata() holds, with no problems;
`ckpt-verify --json DIR` exits 0; `ckpt-verify --write-sidecar DIR` exits 0 and writes
DIR/.metadata.ckptsum; in a copy, one byte flipped inside one chunk's item makes `ckpt-verify --json`
exit 1 with a problem naming that tensor; a truncated .distcp copy (no sidecar) exits 1; dcp.load of
the original still gives the saved values, and nothing in it changed but the sidecar. Exit 0 all
passed, 1 a check failed, 77 torch is not installed.
"""
import io
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_util import built, check, file_sha256, finish, flip_byte, run, skip  # noqa: E402

try:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex, TensorStorageMetadata
except ImportError as e:
    skip("torch missing: %s" % e)

import warnings

warnings.filterwarnings("ignore")

DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64", torch.float16: "F16",
          torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL", torch.float64: "F64"}


def single_state():
    torch.manual_seed(1)
    return {"w": torch.randn(4, 5), "b": torch.randn(7).to(torch.bfloat16),
            "idx": torch.arange(6, dtype=torch.int64).reshape(3, 2), "step": 5,
            "extra": {"blob": io.BytesIO(b"opaque bytes"), "lst": [1, 2, 3]}}


def world_state(mesh=None):
    a = torch.arange(24, dtype=torch.float32).reshape(8, 3)
    b = torch.arange(24, dtype=torch.float32).reshape(4, 6).to(torch.bfloat16)
    r = torch.arange(5, dtype=torch.int64)
    if mesh is not None:
        from torch.distributed.tensor import Shard, distribute_tensor
        a, b = distribute_tensor(a, mesh, [Shard(0)]), distribute_tensor(b, mesh, [Shard(1)])
    return {"a": a, "b": b, "r": r, "step": 11}


def world_rank(rank, world, out, port):
    from torch.distributed.device_mesh import init_device_mesh
    warnings.filterwarnings("ignore")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dcp.save(world_state(init_device_mesh("cpu", (world,))), checkpoint_id=out)
    dist.destroy_process_group()


def tree_digest(d):
    return {name: file_sha256(os.path.join(d, name)) for name in sorted(os.listdir(d))}


def compare(inspect, d, label):
    """ckpt-inspect's description against dcp's own reading of .metadata."""
    md = FileSystemReader(d).read_metadata()
    rc, out, err = run(inspect, "--json", d)
    if not check(rc == 0, "%s: ckpt-inspect --json exit 0 (got %d: %s)" % (label, rc, err.strip()[:300])):
        return
    try:
        j = json.loads(out)
    except ValueError:
        check(False, "%s: ckpt-inspect --json prints JSON" % label)
        return
    check(j.get("kind") == "foreign" and j.get("format") == "dcp", "%s: kind foreign, format dcp" % label)
    check(j.get("problems") == [], "%s: no problems (%s)" % (label, j.get("problems")))
    names = sorted(md.state_dict_metadata)
    got = {t["name"]: t for t in j.get("tensors", [])}
    check(sorted(got) == names, "%s: tensor names %s == %s" % (label, sorted(got), names))
    files = {f["name"]: f for f in j.get("files", [])}
    expected_files = {".metadata"} | {s.relative_path for s in md.storage_data.values()}
    check(set(files) == expected_files, "%s: files %s" % (label, sorted(files)))
    for name, f in files.items():
        check(f.get("present") and f.get("size") == os.path.getsize(os.path.join(d, name)), "%s: file %s present, size" % (label, name))
    for name in names:
        entry, t = md.state_dict_metadata[name], got.get(name)
        if t is None:
            continue
        if isinstance(entry, BytesStorageMetadata):
            s = md.storage_data[MetadataIndex(name)]
            ok = (t["dtype"] == "bytes" and t["shape"] == [s.length] and len(t["pieces"]) == 1 and
                  t["pieces"][0]["file"] == s.relative_path and t["pieces"][0]["offset"] == s.offset and
                  t["pieces"][0]["length"] == s.length)
            check(ok, "%s: %s is bytes [%d] at %s+%d" % (label, name, s.length, s.relative_path, s.offset))
            continue
        assert isinstance(entry, TensorStorageMetadata)
        check(t["dtype"] == DTYPES[entry.properties.dtype], "%s: %s dtype %s" % (label, name, t["dtype"]))
        check(t["shape"] == list(entry.size), "%s: %s shape %s" % (label, name, t["shape"]))
        want = []
        for c in entry.chunks:
            s = md.storage_data[MetadataIndex(name, c.offsets)]
            want.append((list(c.offsets), list(c.sizes), s.relative_path, s.offset, s.length))
        have = [(p["offsets"], p["shape"], p["file"], p["offset"], p["length"]) for p in t["pieces"]]
        check(sorted(have) == sorted(want), "%s: %s chunks %s" % (label, name, sorted(want)))


def damage(verify, d, work, label, tensor):
    """A flipped byte inside one chunk's item (sidecar present); a truncated .distcp (no sidecar)."""
    md = FileSystemReader(d).read_metadata()
    rc, out, err = run(verify, "--json", d)
    check(rc == 0, "%s: ckpt-verify --json exit 0" % label + ("" if rc == 0 else " (got %d: %s %s)" % (rc, out.strip()[:300], err.strip()[:200])))
    try:
        check(json.loads(out).get("ok") is True, "%s: ckpt-verify --json ok true" % label)
    except ValueError:
        check(False, "%s: ckpt-verify --json prints JSON" % label)
    rc, out, err = run(verify, "--write-sidecar", d)
    check(rc == 0, "%s: ckpt-verify --write-sidecar exit 0 (got %d: %s)" % (label, rc, err.strip()[:300]))
    check(os.path.isfile(os.path.join(d, ".metadata.ckptsum")), "%s: sidecar .metadata.ckptsum written" % label)
    rc, out, err = run(verify, "--json", d)
    check(rc == 0, "%s: ckpt-verify --json with its sidecar exit 0 (got %d)" % (label, rc))

    entry = md.state_dict_metadata[tensor]
    s = md.storage_data[MetadataIndex(tensor, entry.chunks[-1].offsets)]
    flipped = os.path.join(work, label + "-flipped")
    shutil.copytree(d, flipped)
    flip_byte(os.path.join(flipped, s.relative_path), s.offset + s.length // 2, 0x10)
    rc, out, err = run(verify, "--json", flipped)
    check(rc == 1, "%s: a flipped byte in %s's last chunk: ckpt-verify exit 1 (got %d)" % (label, tensor, rc))
    try:
        problems = [p for f in json.loads(out).get("foreign", []) for p in f.get("problems", [])]
    except ValueError:
        problems = []
    check(any(p.get("tensor") == tensor for p in problems), "%s: a problem names tensor %s (%s)" % (label, tensor, problems[:2]))

    truncated = os.path.join(work, label + "-truncated")
    shutil.copytree(d, truncated)
    os.unlink(os.path.join(truncated, ".metadata.ckptsum"))
    victim = os.path.join(truncated, s.relative_path)
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) - 100)
    rc, out, err = run(verify, "--json", truncated)
    check(rc == 1, "%s: a truncated %s: ckpt-verify exit 1 (got %d)" % (label, s.relative_path, rc))


def load_back(d, label, template, expected):
    state = template
    dcp.load(state, checkpoint_id=d)
    for k, v in expected.items():
        if isinstance(v, torch.Tensor):
            check(torch.equal(state[k], v), "%s: dcp.load gives back %s" % (label, k))
    check(state["step"] == expected["step"], "%s: dcp.load gives back step" % label)


def main():
    if len(sys.argv) != 2:
        print("usage: test_dcp_interop.py BINARY_DIR")
        return 2
    inspect, verify = (os.path.join(sys.argv[1], t) for t in ("ckpt-inspect", "ckpt-verify"))
    if not built(inspect, verify):
        return finish()
    work = tempfile.mkdtemp(prefix="ckpt-dcp-interop-")
    try:
        single = os.path.join(work, "single")
        dcp.save(single_state(), checkpoint_id=single)
        world = os.path.join(work, "world2")
        mp.spawn(world_rank, args=(2, world, 29000 + os.getpid() % 2000), nprocs=2)

        for d, label, tensor in ((single, "single", "w"), (world, "world2", "a")):
            before = tree_digest(d)
            compare(inspect, d, label)
            damage(verify, d, work, label, tensor)
            after = tree_digest(d)
            after.pop(".metadata.ckptsum", None)
            check(before == after, "%s: the tools changed nothing but the sidecar" % label)

        expected = single_state()
        template = {"w": torch.zeros(4, 5), "b": torch.zeros(7, dtype=torch.bfloat16),
                    "idx": torch.zeros(3, 2, dtype=torch.int64), "step": 0,
                    "extra": {"blob": io.BytesIO(), "lst": []}}
        load_back(single, "single", template, expected)
        expected = world_state()
        template = {"a": torch.zeros(8, 3), "b": torch.zeros(4, 6, dtype=torch.bfloat16),
                    "r": torch.zeros(5, dtype=torch.int64), "step": 0}
        load_back(world, "world2", template, expected)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
