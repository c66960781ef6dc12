"""One verdict (spec/REPORTS.md): ckpt-verify, ckpt-inspect and ckpt-diff, and ckpt.verify, ckpt.inspect,
ckpt.root_digest and ckpt.diff, give the same answer on the same bytes. Each case of the damage table
is judged by the tool (exit code and --json) and by Python (report and exit_code, or the exception
for input that cannot be checked); the two must agree on every field."""

import json
import os
import shutil

import numpy as np
import pytest

import ckpt
import ckpt.numpy
from conftest import flip_byte, tool

DIGEST_ZERO = "0" * 32


def tool_exit_for(error):
    """The exit status a tool gives for the error Python raised: damage 1, anything else 2."""
    return 1 if isinstance(error, (ckpt.CorruptError, ckpt.IncompleteError)) else 2


def ckpt_file(path):
    ckpt.numpy.save_file({"w": np.arange(4096, dtype=np.float32), "b": np.ones(7, np.float16)}, path, chunk_size_log2=12,
                         metadata={"run": "a"})
    return path


def store_with_steps(path, steps=(1, 2)):
    with ckpt.Store(path, chunk_size_log2=12) as s:
        for step in steps:
            s.save(step, {"w": np.arange(4096, dtype=np.float32) + step})
    return path


def step_dir(store, step):
    return os.path.join(store, next(e for e in sorted(os.listdir(store)) if e.startswith("step-%d-" % step)))


def shard_of(store, step):
    d = step_dir(store, step)
    return os.path.join(d, next(e for e in os.listdir(d) if e.endswith(".ckpt")))


def safetensors_file(path):
    from safetensors.numpy import save_file

    save_file({"x": np.arange(3000, dtype=np.float32), "y": np.zeros((4, 5), np.int32)}, str(path), metadata={"k": "v"})
    return path


def gguf_file(path):
    import gguf

    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tensor("t", np.arange(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def dcp_dir(path):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    dcp.save({"a": torch.arange(1000.0), "b": torch.ones(3, 3)}, storage_writer=dcp.FileSystemWriter(str(path)))
    return path


def truncate(path, keep):
    with open(path, "r+b") as f:
        f.truncate(keep)


def append(path, data=b"\0junk"):
    with open(path, "ab") as f:
        f.write(data)


def layout(path):
    """Where a .ckpt file's regions lie, from ckpt-inspect's description."""
    d = ckpt.inspect(path).json
    return {"superblock": 9, "padding": d["data_offset"] - 1, "data": d["data_offset"] + 5, "index": d["index_offset"] + 3,
            "footer": d["file_size"] - 3}


def flip_region(region):
    def damage(p):
        flip_byte(p, layout(p)[region])
    return damage


def flip_in_shard(step):
    def damage(s):
        shard = shard_of(s, step)
        flip_byte(shard, layout(shard)["data"])
    return damage


def flip_journal_last_record(s):
    j = os.path.join(s, "JOURNAL")
    flip_byte(j, os.path.getsize(j) - 9)


def tear_journal(s):
    # A crash during an append leaves a group cut short: the tail is torn, not damaged.
    j = os.path.join(s, "JOURNAL")
    with open(j, "ab") as f:
        f.write(open(j, "rb").read()[-40:-3])


def retire_step(step):
    def damage(s):
        with ckpt.Store(s) as w:
            w.retire(step)
    return damage


def write_sidecar_then(damage=None):
    def prepare(p):
        ckpt.write_sidecar(p)
        if damage is not None:
            damage(p)
    return prepare


def flip_safetensors_data(p):
    size = os.path.getsize(p)
    flip_byte(p, size - 100)


# (name, builder, damage, tool arguments, ckpt.verify keyword arguments)
CASES = [
    ("file intact", ckpt_file, None, [], {}),
    ("file superblock", ckpt_file, flip_region("superblock"), [], {}),
    ("file padding", ckpt_file, flip_region("padding"), [], {}),
    ("file data", ckpt_file, flip_region("data"), [], {}),
    ("file index", ckpt_file, flip_region("index"), [], {}),
    ("file footer", ckpt_file, flip_region("footer"), [], {}),
    ("file trailing bytes", ckpt_file, append, [], {}),
    ("file truncated in the data", ckpt_file, lambda p: truncate(p, layout(p)["data"]), [], {}),
    ("file truncated to 10 bytes", ckpt_file, lambda p: truncate(p, 10), [], {}),
    ("file empty", ckpt_file, lambda p: truncate(p, 0), [], {}),
    ("store intact", store_with_steps, None, [], {}),
    ("store, one step", store_with_steps, None, ["--step", "2"], {"step": 2}),
    ("store, latest", store_with_steps, None, ["--latest"], {"latest": True}),
    ("store, no such step", store_with_steps, None, ["--step", "9"], {"step": 9}),
    ("store data flipped", store_with_steps, flip_in_shard(1), [], {}),
    ("store shard missing", store_with_steps, lambda s: os.remove(shard_of(s, 2)), [], {}),
    ("store manifest flipped", store_with_steps, lambda s: flip_byte(os.path.join(step_dir(s, 1), "MANIFEST"), 20), [], {}),
    ("store journal tail damaged", store_with_steps, flip_journal_last_record, [], {}),
    ("store journal tail torn", store_with_steps, tear_journal, [], {}),
    ("store without a journal", store_with_steps, lambda s: os.remove(os.path.join(s, "JOURNAL")), [], {}),
    ("store with a retired step", store_with_steps, retire_step(1), [], {}),
    ("store, a pin that matches", store_with_steps, None, ["--expect", "ROOT"], {"expect": "ROOT"}),
    ("store, a wrong pin", store_with_steps, None, ["--expect", DIGEST_ZERO], {"expect": DIGEST_ZERO}),
    ("file, a wrong pin", ckpt_file, None, ["--expect", DIGEST_ZERO], {"expect": DIGEST_ZERO}),
    ("file, not a digest", ckpt_file, None, ["--expect", "xyz"], {"expect": "xyz"}),
    ("safetensors intact", safetensors_file, None, [], {}),
    ("safetensors header flipped", safetensors_file, lambda p: flip_byte(p, 12), [], {}),
    ("safetensors truncated", safetensors_file, lambda p: truncate(p, os.path.getsize(p) - 8), [], {}),
    ("safetensors with its sidecar", safetensors_file, write_sidecar_then(), [], {}),
    ("safetensors with its sidecar, data flipped", safetensors_file, write_sidecar_then(flip_safetensors_data), [], {}),
    ("safetensors, a wrong pin", safetensors_file, None, ["--expect", DIGEST_ZERO], {"expect": DIGEST_ZERO}),
    ("gguf intact", gguf_file, None, [], {}),
    ("gguf truncated", gguf_file, lambda p: truncate(p, os.path.getsize(p) - 16), [], {}),
    ("gguf with its sidecar, data flipped", gguf_file, write_sidecar_then(lambda p: flip_byte(p, os.path.getsize(p) - 4)), [], {}),
    ("dcp intact", dcp_dir, None, [], {}),
    ("dcp with its sidecar, data flipped", dcp_dir,
     write_sidecar_then(lambda d: flip_byte(os.path.join(d, "__0_0.distcp"), os.path.getsize(os.path.join(d, "__0_0.distcp")) - 10)), [], {}),
    ("missing path", None, None, [], {}),
    ("step option on a file", ckpt_file, None, ["--step", "1"], {"step": 1}),
]
# A step directory, given directly (the case builds a store and names its step 1).
STEP_CASES = [
    ("step directory", [], {}),
    ("step directory, --latest", ["--latest"], {"latest": True}),
]

SUFFIX = {ckpt_file: "m.ckpt", safetensors_file: "m.safetensors", gguf_file: "m.gguf"}


def run(run_tool, name, *args):
    p = run_tool(name, *args)
    return p.returncode, p.stdout, p.stderr


def build_case(tmp_path, builder, damage):
    path = str(tmp_path / SUFFIX.get(builder, "ck"))
    if builder is not None:
        builder(path)
        if damage is not None:
            damage(path)
    return path


@pytest.mark.parametrize("name,builder,damage,args,kwargs", CASES, ids=[c[0] for c in CASES])
def test_verify_verdicts_agree(tmp_path, run_tool, name, builder, damage, args, kwargs):
    path = build_case(tmp_path, builder, damage)
    if "ROOT" in args:  # the checkpoint's own root digest, as ckpt-inspect --pin prints it
        root = ckpt.root_digest(path)
        args = [root if a == "ROOT" else a for a in args]
        kwargs = {k: root if v == "ROOT" else v for k, v in kwargs.items()}
    rc, out, err = run(run_tool, "ckpt-verify", "--json", *args, path)
    try:
        report = ckpt.verify(path, **kwargs)
    except ckpt.CkptError as e:
        # Only input that cannot be checked raises, and the tool then exits 2 naming the same error.
        assert rc == 2 == tool_exit_for(e), (name, rc, out, err)
        assert str(e) in err, (str(e), err)
        return
    assert rc == report.exit_code, (name, rc, report.exit_code, out, err)
    assert json.loads(out) == report.json, name
    assert report.ok == (rc == 0)
    if rc == 1:
        assert report.problems or report.json.get("pins") or report.json.get("errors"), name


@pytest.mark.parametrize("name,args,kwargs", STEP_CASES, ids=[c[0] for c in STEP_CASES])
def test_step_directory_verdicts_agree(tmp_path, run_tool, name, args, kwargs):
    d = step_dir(store_with_steps(str(tmp_path / "s")), 1)
    rc, out, err = run(run_tool, "ckpt-verify", "--json", *args, d)
    try:
        report = ckpt.verify(d, **kwargs)
    except ckpt.CkptError as e:
        assert rc == 2 == tool_exit_for(e) and str(e) in err, (rc, err, str(e))
        return
    assert rc == report.exit_code == 0 and json.loads(out) == report.json


def test_the_issue_cases_agree(tmp_path, run_tool):
    # A store whose journal's last record has one flipped bit: damage for both.
    s = store_with_steps(str(tmp_path / "s"))
    flip_journal_last_record(s)
    assert run(run_tool, "ckpt-verify", s)[0] == 1
    report = ckpt.verify(s)
    assert not report.ok and report.exit_code == 1
    assert any("damaged journal tail" in p.message for p in report.problems)
    # A safetensors file with a sidecar and one flipped data byte: the tensor, chunk and digests, for both.
    f = safetensors_file(str(tmp_path / "m.safetensors"))
    ckpt.write_sidecar(f)
    flip_safetensors_data(f)
    rc, out, _ = run(run_tool, "ckpt-verify", "--json", f)
    assert rc == 1
    (p,) = ckpt.verify(f).problems
    assert p.tensor == "x" and p.chunk == 0 and p.region == "data" and p.expected and p.found and p.expected != p.found
    assert json.loads(out)["foreign"][0]["problems"][0]["tensor"] == "x"


INSPECT_CASES = [
    ("file", ckpt_file, None, [], {}),
    ("file damaged index", ckpt_file, flip_region("index"), [], {}),
    ("store", store_with_steps, None, [], {}),
    ("store step", store_with_steps, None, ["--step", "1"], {"step": 1}),
    ("store latest", store_with_steps, None, ["--latest"], {"latest": True}),
    ("store journal tail damaged", store_with_steps, flip_journal_last_record, [], {}),
    ("store chunks", store_with_steps, None, ["--latest", "--chunks"], {"latest": True, "chunks": True}),
    ("safetensors", safetensors_file, None, [], {}),
    ("safetensors with sidecar", safetensors_file, write_sidecar_then(), [], {}),
    ("gguf", gguf_file, None, [], {}),
    ("missing", None, None, [], {}),
]


@pytest.mark.parametrize("name,builder,damage,args,kwargs", INSPECT_CASES, ids=[c[0] for c in INSPECT_CASES])
def test_inspect_and_root_digest_agree(tmp_path, run_tool, name, builder, damage, args, kwargs):
    path = build_case(tmp_path, builder, damage)
    rc, out, err = run(run_tool, "ckpt-inspect", "--json", *args, path)
    try:
        inspection = ckpt.inspect(path, **kwargs)
    except ckpt.CkptError as e:
        assert rc == tool_exit_for(e) and str(e) in err, (rc, out, err, str(e))
        return
    assert rc == inspection.exit_code, (rc, inspection.exit_code, err)
    assert json.loads(out) == inspection.json
    # The root digest: ckpt-inspect --pin's line, or the same failure.
    pin_args = [a for a in args if a != "--chunks"]
    rc, out, err = run(run_tool, "ckpt-inspect", "--pin", *pin_args, path)
    try:
        root = ckpt.root_digest(path, step=kwargs.get("step"))
    except ckpt.CkptError as e:
        assert rc == tool_exit_for(e) and str(e) in err, (rc, out, err, str(e))
        return
    assert rc == inspection.exit_code and out.split()[0] == root, (rc, out, err, root)


def test_diffs_agree(tmp_path, run_tool):
    a = ckpt_file(str(tmp_path / "a.ckpt"))
    b = str(tmp_path / "b.ckpt")
    ckpt.numpy.save_file({"w": np.arange(4096, dtype=np.float32) * np.float32(1 + (np.arange(4096) == 2000)),
                          "c": np.zeros(3, np.int8)}, b, chunk_size_log2=12, metadata={"run": "b"})
    s = store_with_steps(str(tmp_path / "s"), steps=(1, 2, 3))
    st = safetensors_file(str(tmp_path / "m.safetensors"))
    for left, right, args, kwargs in [
        (a, a, [], {}),
        (a, b, [], {}),
        (a, b, ["--tensors", "w"], {"tensors": ["w"]}),
        (s, s, ["--step-a", "1"], {"step_a": 1}),
        (s, s, ["--step-a", "1", "--step-b", "2"], {"step_a": 1, "step_b": 2}),
        (st, a, [], {}),
        (a, str(tmp_path / "missing"), [], {}),
    ]:
        rc, out, err = run(run_tool, "ckpt-diff", "--json", *args, left, right)
        try:
            d = ckpt.diff(left, right, **kwargs)
        except ckpt.CkptError as e:
            assert rc == tool_exit_for(e) and str(e) in err, (left, right, rc, err, str(e))
            continue
        assert rc == d.exit_code, (left, right, args)
        assert json.loads(out) == d.json


def test_write_sidecar_agrees_with_the_tool(tmp_path, run_tool):
    os.mkdir(tmp_path / "a")
    os.mkdir(tmp_path / "b")
    one = safetensors_file(str(tmp_path / "a" / "m.safetensors"))
    two = str(tmp_path / "b" / "m.safetensors")
    shutil.copy(one, two)
    written = ckpt.write_sidecar(one, chunk_size=4096)
    rc, out, _ = run(run_tool, "ckpt-verify", "--write-sidecar", "--json", "--sidecar-chunk-size", "4096", two)
    assert rc == 0
    doc = json.loads(out)["sidecars"][0]
    assert {k: v for k, v in doc.items() if k not in ("path", "sidecar")} == \
        {k: v for k, v in written.json.items() if k not in ("path", "sidecar")}
    assert open(one + ".ckptsum", "rb").read() == open(two + ".ckptsum", "rb").read()
    assert ckpt.verify(one).foreign[0].data_checked
    with pytest.raises(ckpt.InvalidArgumentError):
        ckpt.write_sidecar(ckpt_file(str(tmp_path / "m.ckpt")))


def test_report_objects_have_the_tool_fields(tmp_path):
    path = ckpt_file(str(tmp_path / "m.ckpt"))
    flip_byte(path, layout(path)["data"])
    r = ckpt.verify(path)
    assert r.kind == "file" and not r and r.exit_code == 1
    assert r.files[0].status == "damaged" and r.summary.damaged == 1
    (p,) = r.problems
    assert (p.tensor, p.piece, p.chunk, p.region) == ("w", 0, 0, "data") and p.length == 4096
    assert p.expected != p.found and p.file == path
    with pytest.raises(ckpt.NotFoundError):
        ckpt.verify(str(tmp_path / "nothing"))


TEXT_CASES = [
    ("store", store_with_steps, None),
    ("store with a torn journal", store_with_steps, tear_journal),
    ("store with a damaged journal tail", store_with_steps, flip_journal_last_record),
    ("file", ckpt_file, None),
    ("file with damaged data", ckpt_file, flip_region("data")),
    ("safetensors", safetensors_file, None),
]


@pytest.mark.parametrize("name,builder,damage", TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_text_is_what_the_tools_print(tmp_path, run_tool, name, builder, damage):
    # One renderer (spec/REPORTS.md 7): the tool prints the library's text, and the report carries it.
    path = build_case(tmp_path, builder, damage)
    rc, out, _ = run(run_tool, "ckpt-verify", path)
    report = ckpt.verify(path)
    assert (rc, out) == (report.exit_code, report.text) and str(report) == out, name
    rc, out, _ = run(run_tool, "ckpt-inspect", path)
    inspection = ckpt.inspect(path)
    assert (rc, out) == (inspection.exit_code, inspection.text), name
    assert inspection.kind == inspection.json["subject"] and inspection.json["report"] == "inspect"


def test_diff_text_and_kind_are_the_librarys(tmp_path, run_tool):
    s = store_with_steps(str(tmp_path / "s"))
    rc, out, _ = run(run_tool, "ckpt-diff", "--step-a", "1", s, s)
    d = ckpt.diff(s, s, step_a=1)
    assert rc == d.exit_code == d.json["exit_code"] == 1 and d.text == out
    assert d.kind == "checkpoints" and d.json["report"] == "diff"


REPAIR_CASES = [
    ("consistent", None),
    ("torn journal", tear_journal),
    ("damaged journal tail", flip_journal_last_record),
    ("step data flipped", flip_in_shard(1)),
]


@pytest.mark.parametrize("name,damage", REPAIR_CASES, ids=[c[0] for c in REPAIR_CASES])
def test_repairs_agree(tmp_path, run_tool, name, damage):
    s = store_with_steps(str(tmp_path / "s"))
    if damage is not None:
        damage(s)
    # A dry run changes nothing: the tool and Python judge the same bytes.
    rc, out, err = run(run_tool, "ckpt-repair", "--dry-run", "--json", s)
    dry = ckpt.repair(s, dry_run=True)
    assert rc == dry.exit_code == dry.json["exit"], (name, rc, out, err)
    assert json.loads(out) == dry.json
    assert dry.kind == "store" and dry.json["report"] == "repair"
    rc, out, _ = run(run_tool, "ckpt-repair", "--dry-run", s)
    assert out == dry.text
    repaired = ckpt.repair(s)
    assert bool(repaired) == (repaired.exit_code == 0)
    # Afterwards the tool finds what the repair left: nothing to do, or the damage it cannot repair.
    assert run(run_tool, "ckpt-repair", "--dry-run", s)[0] == repaired.exit_code


def test_repair_misuse_raises_as_the_tool_exits(tmp_path, run_tool):
    f = ckpt_file(str(tmp_path / "m.ckpt"))
    rc, _, err = run(run_tool, "ckpt-repair", f)
    with pytest.raises(ckpt.InvalidArgumentError) as e:
        ckpt.repair(f)
    assert rc == 2 and str(e.value) in err
