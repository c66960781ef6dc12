"""ckpt.torch: torch tensors of every dtype, against safetensors.torch as the independent reference."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import safetensors.torch  # noqa: E402

import ckpt  # noqa: E402
import ckpt.torch  # noqa: E402


def torch_tensors():
    g = torch.Generator().manual_seed(0)
    out = {
        "f32": torch.randn(33, 17, generator=g),
        "f16": torch.randn(5, 6, generator=g).half(),
        "bf16": torch.randn(7, 129, generator=g).bfloat16(),
        "f64": torch.randn(3, generator=g).double(),
        "i64": torch.randint(-(2**40), 2**40, (11,), generator=g),
        "i32": torch.randint(-1000, 1000, (2, 3, 4), generator=g, dtype=torch.int32),
        "i16": torch.randint(-1000, 1000, (9,), generator=g, dtype=torch.int16),
        "i8": torch.randint(-100, 100, (9,), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 255, (9,), generator=g, dtype=torch.uint8),
        "bool": torch.rand(10, generator=g) > 0.5,
        "c64": torch.randn(4, dtype=torch.complex64, generator=g),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "noncontig": torch.randn(8, 6, generator=g).t(),
    }
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if hasattr(torch, name):
            out[name] = torch.randn(64, generator=g).to(getattr(torch, name))
    for name in ("uint16", "uint32", "uint64"):
        if hasattr(torch, name):
            out[name] = torch.randint(0, 200, (6,), generator=g, dtype=torch.int64).to(getattr(torch, name))
    return out


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.numel():
        av, bv = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
        if av.is_complex():
            av, bv = torch.view_as_real(av).reshape(-1), torch.view_as_real(bv).reshape(-1)
        assert torch.equal(av.view(torch.uint8), bv.view(torch.uint8))


def test_every_torch_dtype_round_trips_bit_exact(tmp_path):
    tensors = torch_tensors()
    ckpt.torch.save_file(tensors, tmp_path / "t.ckpt", metadata={"step": 3})
    back = ckpt.torch.load_file(tmp_path / "t.ckpt")
    assert list(back) == list(tensors)
    for k in tensors:
        same(back[k], tensors[k])


def test_torch_and_numpy_read_the_same_bytes_safetensors_writes(tmp_path, run_tool):
    # safetensors writes; ckpt-convert converts; ckpt.torch reads: equal to safetensors' own read.
    tensors = {k: v.contiguous() for k, v in torch_tensors().items() if k not in ("c64",) and not k.startswith("uint")}
    safetensors.torch.save_file(tensors, tmp_path / "ref.safetensors", metadata={"who": "safetensors"})
    run_tool("ckpt-convert", tmp_path / "ref.safetensors", tmp_path / "conv.ckpt", check=0)
    ref = safetensors.torch.load_file(tmp_path / "ref.safetensors")
    ours = ckpt.torch.load_file(tmp_path / "conv.ckpt")
    assert set(ours) == set(ref)
    for k in ref:
        same(ours[k], ref[k])
    with ckpt.safe_open(tmp_path / "conv.ckpt", framework="pt") as f:
        assert f.metadata() == {"who": "safetensors"}
        same(f.get_slice("f32")[3:9, 2:], ref["f32"][3:9, 2:])
    # And the other way: what ckpt writes, converted, is what safetensors reads.
    ckpt.torch.save_file(ref, tmp_path / "ours.ckpt")
    run_tool("ckpt-convert", tmp_path / "ours.ckpt", tmp_path / "back.safetensors", check=0)
    back = safetensors.torch.load_file(tmp_path / "back.safetensors")
    for k in ref:
        same(back[k], ref[k])


def test_a_model_state_dict_round_trips(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    ckpt.torch.save_model(model, tmp_path / "model.ckpt")
    other = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    ckpt.torch.load_model(other, tmp_path / "model.ckpt")
    for (ka, a), (kb, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert ka == kb and torch.equal(a, b)


def test_damage_in_a_torch_load_names_the_tensor(tmp_path):
    ckpt.torch.save_file({"a": torch.ones(1000), "b": torch.full((1000,), 7.25)}, tmp_path / "t.ckpt")
    data = bytearray(open(tmp_path / "t.ckpt", "rb").read())
    at = data.index(torch.full((16,), 7.25).numpy().tobytes())  # inside b's bytes
    data[at + 3] ^= 0x10
    open(tmp_path / "t.ckpt", "wb").write(bytes(data))
    with pytest.raises(ckpt.CorruptError) as e:
        ckpt.torch.load_file(tmp_path / "t.ckpt")
    assert e.value.tensor == "b" and "tensor 'b'" in str(e.value)
