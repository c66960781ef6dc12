"""Stores on S3 from Python (spec/OBJECT.md, spec/PYTHON.md 2.3): ckpt.Store("s3://..."), the reports on s3://
paths, and the DCP backend with gloo ranks, against a moto server this session starts (conftest.s3_server)."""

import os

import numpy as np
import pytest

import ckpt
from ckpt.errors import CkptError

HERE = os.path.dirname(os.path.abspath(__file__))


def weights(step):
    rng = np.random.default_rng(step)
    return {"w": rng.standard_normal((300, 257)).astype(np.float32), "b": np.arange(17, dtype=np.int64) + step}


def flip_object_byte(url, key_suffix, offset):
    """Flips one byte of the object under `url` whose key ends with key_suffix, on the server itself."""
    import boto3

    bucket, _, prefix = url[len("s3://"):].partition("/")
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name=os.environ["AWS_REGION"])
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    key = next(k for k in keys if k.endswith(key_suffix))
    body = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    body[offset] ^= 0x40
    client.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    return key


def test_a_store_on_s3_saves_lists_loads_and_retires(s3_url):
    with ckpt.Store(s3_url, keep_last=2) as s:
        for step in (1, 2, 3):
            commit = s.save(step, weights(step), state={"data_offset": step * 100, "values": {"lr": 0.5 / step}})
            assert commit["step"] == step
        assert s.steps() == [2, 3]  # retention: the retire object first, then its objects deleted
        assert s.latest() == 3
        assert s.recovery()["clean"]
    reader = ckpt.Store(s3_url, read_only=True)
    assert reader.steps() == [2, 3]
    tensors, state = reader.load()
    for name, value in weights(3).items():
        assert np.array_equal(tensors[name], value)
    assert state["data_offset"] == 300 and state["values"]["lr"] == pytest.approx(0.5 / 3)
    with reader.open_step(2) as f:  # a slice reads only the chunks it touches, verified
        assert np.array_equal(f.get_slice("w")[10:20], weights(2)["w"][10:20])
    report = ckpt.verify(s3_url)
    assert report.ok, report
    inspection = ckpt.inspect(s3_url, latest=True)
    assert inspection.ok and inspection.kind == "step", inspection.json
    assert sorted(t["name"] for t in inspection.json["identity"]["tensors"]) == ["b", "w"]


def test_a_step_is_committed_once_on_s3(s3_url):
    # One rule on every store (spec/JOURNAL.md 10): a live step number is refused; a lower one that is not
    # live is saved; a retired one is saved again.
    with ckpt.Store(s3_url) as s:
        s.save(5, weights(5))
        with pytest.raises(CkptError) as e:
            s.save(5, weights(6))
        assert e.value.code == "conflict" and "committed once" in str(e.value)
        s.save(4, weights(4))
        assert s.steps() == [4, 5] and s.latest() == 5
        s.retire(5)
        s.save(5, weights(6))
        assert s.steps() == [4, 5]
    tensors, _ = ckpt.Store(s3_url, read_only=True).load(5)
    assert all(np.array_equal(tensors[k], v) for k, v in weights(6).items())


def test_an_abandoned_transaction_on_s3_never_becomes_a_step(s3_url):
    with ckpt.Store(s3_url) as s:
        s.save(1, weights(1))
        with pytest.raises(RuntimeError):
            with s.begin(2) as tx:
                tx.add_tensor("w", weights(2)["w"])
                raise RuntimeError("the training loop failed mid-save")
        assert s.steps() == [1]
    assert ckpt.Store(s3_url, read_only=True).latest() == 1


def test_a_flipped_byte_on_the_server_is_found_and_never_loaded(s3_url):
    with ckpt.Store(s3_url) as s:
        s.save(1, weights(1))
    flip_object_byte(s3_url, "shard-00000-of-00001.ckpt", 70000)
    report = ckpt.verify(s3_url)
    assert not report.ok
    with pytest.raises(CkptError) as e:
        ckpt.Store(s3_url, read_only=True).load()
    assert e.value.code == "corrupt" and "shard-00000-of-00001.ckpt" in str(e.value)


def test_async_saves_on_s3_commit_behind_the_caller_and_report_failures_at_wait(s3_url):
    with ckpt.Store(s3_url) as s:
        for step in (1, 2):
            ticket = s.save_async(step, weights(step), state={"data_offset": step})
            assert ticket.step == step and not ticket.skipped
        s.wait()
        assert s.steps() == [1, 2]
        s.save_async(2, weights(3))  # a step is committed once: the background save fails, wait() says so
        with pytest.raises(CkptError) as e:
            s.wait()
        assert e.value.code == "conflict"
    reader = ckpt.Store(s3_url, read_only=True)
    assert reader.steps() == [1, 2]
    tensors, state = reader.load(2)
    assert all(np.array_equal(tensors[k], v) for k, v in weights(2).items()) and state["data_offset"] == 2


def test_a_missing_store_on_s3_is_not_found_read_only(s3_url):
    with pytest.raises(CkptError) as e:
        ckpt.Store(s3_url, read_only=True)
    assert e.value.code == "not_found"


torch = pytest.importorskip("torch")


def test_dcp_with_gloo_ranks_on_s3_commits_whole_steps_and_survives_a_rank_killed_mid_save(s3_url, run_tool):
    from test_dcp import ok, run_ranks

    ok(run_ranks("save", s3_url, 2, 1))
    results = run_ranks("kill", s3_url, 2, 2)  # rank 1 SIGKILLed while it uploads its shard
    assert any(rc != 0 for rc, _, _ in results)
    s = ckpt.Store(s3_url, read_only=True)
    assert s.steps() == [1] and s.step_info()[0]["world_size"] == 2
    ok(run_ranks("load", s3_url, 1, 1))  # 2 ranks' step loads into 1, every byte verified
    ok(run_ranks("save", s3_url, 2, 3))  # the next save commits
    assert ckpt.Store(s3_url, read_only=True).steps() == [1, 3]
    assert ckpt.verify(s3_url).ok
    run_tool("ckpt-verify", s3_url, check=0)
