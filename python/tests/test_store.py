"""ckpt.Store from Python: steps, state, retention, async save, verification, recovery (spec/PYTHON.md 2.3)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ckpt
import ckpt.numpy
from conftest import flip_byte


def weights(step, n=1000):
    return {"w": np.arange(n, dtype=np.float32) + step, "b": np.full(7, step, np.int64)}


def test_commit_latest_open_step_and_state(tmp_path):
    with ckpt.Store(tmp_path / "s") as store:
        assert store.latest() is None and store.steps() == []
        for step in (1, 2, 3):
            info = store.save(step, weights(step), state={"rng": b"rng%d" % step, "data_epoch": 1,
                                                           "data_offset": step * 32, "values": {"lr": 0.1, "tag": "x"}},
                              optimizer={"adam.m": np.ones(4, np.float32) * step})
            assert info["step"] == step
        assert store.steps() == [1, 2, 3] and store.latest() == 3
        tensors, state = store.load(2)
        np.testing.assert_array_equal(tensors["w"], weights(2)["w"])
        np.testing.assert_array_equal(tensors["adam.m"], np.full(4, 2, np.float32))
        assert state["rng"] == b"rng2" and state["data_offset"] == 64 and state["values"] == {"lr": 0.1, "tag": "x"}
        assert state["optimizer_tensors"] == ["adam.m"] and state["step"] == 2
        with store.open_step() as f:
            assert f.step == 3
    # A reader of the path sees the same steps; load_file reads a store's latest step.
    assert ckpt.Store(tmp_path / "s", read_only=True).steps() == [1, 2, 3]
    np.testing.assert_array_equal(ckpt.numpy.load_file(tmp_path / "s")["w"], weights(3)["w"])


def test_a_transaction_left_by_an_exception_is_abandoned(tmp_path):
    with ckpt.Store(tmp_path / "s") as store:
        store.save(1, weights(1))
        with pytest.raises(RuntimeError):
            with store.begin(2) as tx:
                tx.add_tensor("w", np.ones(3))
                raise RuntimeError("training crashed")
        assert store.latest() == 1
        assert not any(e.startswith("step-2-") for e in os.listdir(tmp_path / "s"))
        with pytest.raises(ckpt.ConflictError):
            ckpt.Store(tmp_path / "s")  # one writer at a time
        with store.begin(2) as tx:
            tx.add_tensor("w", np.ones(3))
            with pytest.raises(ckpt.InvalidArgumentError):
                tx.set_state(values={"bad": object()})
            tx.commit()
        assert store.steps() == [1, 2]


def test_retention_keeps_the_last_steps(tmp_path):
    with ckpt.Store(tmp_path / "s", keep_last=2, keep_every=10) as store:
        for step in range(1, 13):
            store.save(step, weights(step, 10))
        assert store.steps() == [10, 11, 12]
        store.retire(11)
        assert store.steps() == [10, 12]
        assert store.apply_retention(1) == [10]


def test_async_save_blocks_only_for_the_copy_and_commits(tmp_path):
    with ckpt.Store(tmp_path / "s") as store:
        big = {"w": np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)}
        original = big["w"].copy()
        store.prepare_async(1 << 20)  # smaller than the state: it streams through the pool
        ticket = store.save_async(5, big, state={"values": {"loss": 1.5}})
        assert ticket.step == 5 and not ticket.skipped and ticket.stall_seconds >= 0
        big["w"][:] = 0  # the caller may change its tensors once save_async returns
        store.wait()
        assert store.latest() == 5
        tensors, state = store.load(5)
        np.testing.assert_array_equal(tensors["w"], original)
        assert state["values"] == {"loss": 1.5}
        store.save_async(6, {"w": original[:10]})
        store.wait()
        assert store.steps() == [5, 6]


def test_verify_reports_damage_by_tensor_chunk_and_range(tmp_path):
    with ckpt.Store(tmp_path / "s", chunk_size_log2=12) as store:
        store.save(1, {"w": np.arange(4096, dtype=np.float32)})
    report = ckpt.verify(tmp_path / "s")
    assert report.ok and report.kind == "store" and report.chunks_checked >= 4
    step_dir = next(e for e in os.listdir(tmp_path / "s") if e.startswith("step-1-"))
    shard = tmp_path / "s" / step_dir / "shard-00000-of-00001.ckpt"
    data = open(shard, "rb").read()
    at = data.index(np.arange(2048, 2052, dtype=np.float32).tobytes())  # chunk 2 of w
    flip_byte(shard, at)
    report = ckpt.verify(tmp_path / "s")
    assert not report.ok
    (p,) = report.problems
    assert (p.tensor, p.chunk, p.region) == ("w", 2, "data") and p.offset <= at < p.offset + p.length
    with pytest.raises(ckpt.CorruptError) as e:
        ckpt.Store(tmp_path / "s", read_only=True).load(1)
    assert e.value.tensor == "w" and e.value.chunk == 2


def test_a_writer_killed_mid_save_leaves_the_previous_step_latest(tmp_path):
    path = tmp_path / "s"
    with ckpt.Store(path) as store:
        store.save(1, weights(1))
    # A child process begins step 2, writes part of it and is killed (SIGKILL) before commit.
    child = textwrap.dedent(f"""
        import os, signal, numpy as np, ckpt
        store = ckpt.Store({str(path)!r})
        tx = store.begin(2)
        tx.add_tensor("w", np.ones(1 << 20, np.float32))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", child])
    assert p.returncode == -9
    assert ckpt.Store(path, read_only=True).latest() == 1
    with ckpt.Store(path) as store:  # the next writer's recovery removes the unfinished step
        assert any("abort" in a.lower() or "remove" in a.lower() for a in store.recovery()["actions"])
        assert store.latest() == 1
        store.save(2, weights(2))
    assert ckpt.verify(path).ok
