"""ckpt.numpy and safe_open: the safetensors-style API over .ckpt files (spec/PYTHON.md 2)."""

import os

import numpy as np
import pytest
import safetensors.numpy

import ckpt
import ckpt.numpy
from conftest import flip_byte

ml_dtypes = pytest.importorskip("ml_dtypes")

DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16, "U32": np.uint32,
    "I32": np.int32, "U64": np.uint64, "I64": np.int64, "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "C64": np.complex64, "BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E5M2": ml_dtypes.float8_e5m2,
}


def random_tensors(seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for i, (name, dt) in enumerate(DTYPES.items()):
        raw = rng.integers(0, 256, size=(3, 5, 7 + i) if i % 2 else (40 + i,), dtype=np.uint8)
        nbytes = np.dtype(dt).itemsize
        raw = raw[: raw.size - raw.size % nbytes] if raw.ndim == 1 else raw
        if name == "BOOL":
            out[name] = raw.astype(bool)
        else:
            out[name] = np.ascontiguousarray(raw).reshape(-1)[: (raw.size // nbytes) * nbytes].view(dt)
    out["empty"] = np.zeros((0, 4), np.float32)
    out["scalar"] = np.array(3.5, np.float64)
    return out


def test_every_dtype_round_trips_bit_exact(tmp_path):
    tensors = random_tensors()
    path = tmp_path / "all.ckpt"
    ckpt.numpy.save_file(tensors, path, metadata={"format": "np", "n": 7, "lr": 0.5, "ok": True, "blob": b"\x00\x01"})
    back = ckpt.numpy.load_file(path)
    assert list(back) == list(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
        assert back[k].tobytes() == v.tobytes(), k
    with ckpt.safe_open(path, framework="np") as f:
        assert f.metadata() == {"format": "np", "n": 7, "lr": 0.5, "ok": True, "blob": b"\x00\x01"}


def test_what_safetensors_saves_ckpt_saves_byte_for_byte(tmp_path):
    # The independent implementation's view of the same dict: every tensor's bytes agree.
    tensors = {k: v for k, v in random_tensors(1).items() if k not in ("C64", "BOOL", "scalar")}
    safetensors.numpy.save_file({k: v for k, v in tensors.items() if k in ("U8", "I32", "F32", "F64", "F16", "empty")},
                                tmp_path / "ref.safetensors")
    ref = safetensors.numpy.load_file(tmp_path / "ref.safetensors")
    ckpt.numpy.save_file(ref, tmp_path / "same.ckpt")
    ours = ckpt.numpy.load_file(tmp_path / "same.ckpt")
    assert set(ours) == set(ref)
    for k in ref:
        assert ours[k].dtype == ref[k].dtype and ours[k].tobytes() == ref[k].tobytes(), k


def test_save_replaces_a_file_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "m.ckpt"
    ckpt.numpy.save_file({"a": np.arange(10)}, path)
    ckpt.numpy.save_file({"b": np.ones(3)}, path)
    assert list(ckpt.numpy.load_file(path)) == ["b"]
    assert os.listdir(tmp_path) == ["m.ckpt"]
    with pytest.raises(TypeError):
        ckpt.numpy.save_file({"c": ["not", "an", "array"]}, path)
    with pytest.raises(ckpt.InvalidArgumentError):
        ckpt.numpy.save_file({"c": np.ones(2)}, path, metadata={"k": [1, 2]})
    assert list(ckpt.numpy.load_file(path)) == ["b"]  # a failed save leaves the old file
    assert os.listdir(tmp_path) == ["m.ckpt"]


def chunked_file(tmp_path, shape=(64, 1024)):
    # 4 KiB chunks: each row of 1024 float32 is one chunk.
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    path = tmp_path / "w.ckpt"
    ckpt.numpy.save_file({"w": a, "b": np.ones(5, np.float32)}, path, chunk_size_log2=12)
    return a, path


def data_offset(path, tensor="w"):
    # The first chunk of a tensor: where ckpt-inspect --json would say; found from the report of damage.
    report = ckpt.verify(path)
    assert report.ok
    with open(path, "rb") as f:
        data = f.read()
    marker = np.arange(4, dtype=np.float32).tobytes()
    return data.index(marker)


@pytest.mark.parametrize("index", [
    np.s_[3:9, :], np.s_[10], np.s_[-1, 5:-5], np.s_[..., 17], np.s_[:, ::3], np.s_[::-2, 1:4], np.s_[5:5],
    np.s_[63, 1023], np.s_[:], np.s_[2:40:7, -3:],
])
def test_get_slice_matches_numpy_indexing(tmp_path, index):
    a, path = chunked_file(tmp_path)
    with ckpt.safe_open(path, framework="numpy") as f:
        s = f.get_slice("w")
        assert s.get_shape() == [64, 1024] and s.get_dtype() == "F32"
        got = s[index]
        np.testing.assert_array_equal(got, a[index])


def test_a_slice_reads_only_the_chunks_it_touches(tmp_path):
    a, path = chunked_file(tmp_path)
    base = data_offset(path)
    flip_byte(path, base + 40 * 4096 + 8)  # row 40: chunk 40
    with ckpt.safe_open(path, framework="numpy") as f:
        np.testing.assert_array_equal(f.get_slice("w")[0:40], a[0:40])  # never reads row 40
        np.testing.assert_array_equal(f.get_tensor("b"), np.ones(5, np.float32))
        with pytest.raises(ckpt.CorruptError) as e:
            f.get_slice("w")[39:41]
    err = e.value
    assert err.tensor == "w" and err.chunk == 40 and err.file == str(path)
    assert err.byte_range == (base + 40 * 4096, base + 41 * 4096)
    assert err.expected and err.found and err.expected != err.found
    report = ckpt.verify(path)
    assert not report.ok and [p.chunk for p in report.problems] == [40]


def test_mapped_tensors_are_verified_and_copy_on_write(tmp_path):
    a, path = chunked_file(tmp_path)
    before = open(path, "rb").read()
    with ckpt.safe_open(path, framework="numpy") as f:
        v = f.get_tensor("w")
        np.testing.assert_array_equal(v, a)
        assert v.flags.writeable and not v.flags.owndata  # a view of the mapping
        v[0, 0] = -1  # changes this process's copy only
    del f
    assert v[0, 0] == -1 and open(path, "rb").read() == before  # the mapping outlives the reader; the file is untouched
    np.testing.assert_array_equal(ckpt.numpy.load_file(path, mmap=False)["w"], a)
    flip_byte(path, data_offset(path) + 5)
    for mmap in (True, False):
        with ckpt.safe_open(path, framework="numpy", mmap=mmap) as f:
            with pytest.raises(ckpt.CorruptError):
                f.get_tensor("w")
    ckpt.numpy.save_file({"empty": np.zeros((0, 3), np.float16), "one": np.ones(1, np.int8)}, tmp_path / "small.ckpt")
    with ckpt.safe_open(tmp_path / "small.ckpt", framework="numpy") as f:
        assert f.get_tensor("empty").shape == (0, 3) and f.get_tensor("one").tolist() == [1]


# Damage as a table: what is done to a good file, and the error a reader must raise.
DAMAGE = [
    ("truncated to half", lambda p, n: os.truncate(p, n // 2), ckpt.IntegrityError),
    ("truncated by one byte", lambda p, n: os.truncate(p, n - 1), ckpt.IntegrityError),
    ("superblock byte flipped", lambda p, n: flip_byte(p, 9), ckpt.IntegrityError),
    ("last byte flipped", lambda p, n: flip_byte(p, n - 1), ckpt.IntegrityError),
    ("emptied", lambda p, n: os.truncate(p, 0), ckpt.IntegrityError),
]


@pytest.mark.parametrize("what,damage,error", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_damaged_file_raises_a_clear_error(tmp_path, what, damage, error):
    _, path = chunked_file(tmp_path)
    damage(str(path), os.path.getsize(path))
    with pytest.raises(error) as e:
        ckpt.numpy.load_file(path)
    assert str(path) in str(e.value)


def test_missing_things_are_named(tmp_path):
    with pytest.raises(ckpt.NotFoundError):
        ckpt.numpy.load_file(tmp_path / "nope.ckpt")
    _, path = chunked_file(tmp_path)
    with ckpt.safe_open(path, framework="np") as f:
        with pytest.raises(KeyError, match="no tensor 'x'"):
            f.get_tensor("x")
        with pytest.raises(IndexError):
            f.get_slice("w")[64]
    with pytest.raises(ValueError):
        ckpt.safe_open(path, framework="jax")


def test_xxh3_matches_the_reference_package():
    xxhash = pytest.importorskip("xxhash")
    data = os.urandom(10000)
    assert ckpt.xxh3_64(data) == xxhash.xxh3_64_intdigest(data)
