"""The PyTorch DCP backend on the store, with torch.distributed (gloo) on 1, 2 and 4 processes
(spec/PYTHON.md 4)."""

import os
import subprocess
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

import ckpt  # noqa: E402
from conftest import flip_byte  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def run_ranks(action, store, world, step, timeout=240):
    """Runs `world` ranks of dcp_worker.py; returns their CompletedProcess-like results."""
    init = tempfile.mktemp(prefix="ckpt-dcp-init-")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "dcp_worker.py"), action, str(store), str(r), str(world),
                               init, str(step)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append((p.returncode, stdout, stderr))
    if os.path.exists(init):
        os.unlink(init)
    return out


def ok(results):
    for rc, stdout, stderr in results:
        assert rc == 0 and "OK" in stdout, (rc, stdout, stderr[-3000:])


def test_save_with_4_ranks_loads_with_1_and_2(tmp_path, run_tool):
    store = tmp_path / "dcp-store"
    ok(run_ranks("save", store, 4, 1))
    ok(run_ranks("async", store, 4, 2))
    s = ckpt.Store(store, read_only=True)
    assert s.steps() == [1, 2]
    assert [i["world_size"] for i in s.step_info()] == [4, 4]
    ok(run_ranks("load", store, 1, 1))
    ok(run_ranks("load", store, 2, 2))
    assert ckpt.verify(store).ok
    # An ordinary store step: the tools read it.
    run_tool("ckpt-verify", store, check=0)
    p = run_tool("ckpt-inspect", store, "--latest", check=0)
    assert "model.w" in p.stdout
    run_tool("ckpt-reshard", store, "-o", tmp_path / "resharded", "--world-size", "1", check=0)
    ok(run_ranks("load", tmp_path / "resharded", 1, 2))  # a step DCP did not write loads too


def test_a_rank_killed_mid_save_leaves_the_previous_step_latest(tmp_path):
    store = tmp_path / "dcp-store"
    ok(run_ranks("save", store, 4, 1))
    results = run_ranks("kill", store, 4, 2, timeout=180)
    assert results[3][0] == -9  # the killed rank
    assert any(rc != 0 for rc, _, _ in results[:3])  # the others' save failed instead of committing
    assert ckpt.Store(store, read_only=True).steps() == [1]
    ok(run_ranks("load", store, 1, 1))
    ok(run_ranks("save", store, 4, 2))  # the next save's open removes what the failed one left
    assert ckpt.Store(store, read_only=True).steps() == [1, 2]
    assert not [e for e in os.listdir(store) if e.startswith("step-2-")][1:]
    assert ckpt.verify(store).ok


def test_a_damaged_byte_makes_dcp_load_name_the_tensor(tmp_path):
    store = tmp_path / "dcp-store"
    ok(run_ranks("save", store, 1, 3))
    step_dir = store / next(e for e in os.listdir(store) if e.startswith("step-3-"))
    shard = step_dir / "shard-00000-of-00001.ckpt"
    from worker_data import weight_bytes

    data = open(shard, "rb").read()
    at = data.index(weight_bytes(3)[:64])
    flip_byte(shard, at + 10)
    rc, stdout, stderr = run_ranks("load", store, 1, 3)[0]
    assert rc != 0
    assert "model.w" in stderr and "digest expected" in stderr, stderr[-3000:]
    report = ckpt.verify(store)
    assert [p.tensor for p in report.problems] == ["model.w"]


def test_dcp_in_one_process_without_a_process_group(tmp_path):
    from ckpt.torch.dcp import StorageReader, StorageWriter

    store = tmp_path / "one"
    state = {"a": torch.arange(10.0), "n": 5, "nested": {"b": torch.ones(2, 3, dtype=torch.float16)}}
    dcp.save(state, storage_writer=StorageWriter(store))  # step 0: the store was empty
    state["a"] += 1
    dcp.save(state, storage_writer=StorageWriter(store))  # step 1: one above the latest
    assert ckpt.Store(store, read_only=True).steps() == [0, 1]
    target = {"a": torch.zeros(10), "n": 0, "nested": {"b": torch.zeros(2, 3, dtype=torch.float16)}}
    dcp.load(target, storage_reader=StorageReader(store, step=0))
    assert torch.equal(target["a"], torch.arange(10.0)) and target["n"] == 5
    assert torch.equal(target["nested"]["b"], torch.ones(2, 3, dtype=torch.float16))
    dcp.load(target, storage_reader=StorageReader(store))
    assert torch.equal(target["a"], torch.arange(10.0) + 1)
