"""torch tensors to and from .ckpt files, as ``safetensors.torch`` does (spec/PYTHON.md 2.1).

CPU tensors are written from their own memory; CUDA tensors are copied through the host. Every dtype
ckpt has maps to torch's (bfloat16, float8_e4m3fn, float8_e5m2, float8_e8m0fnu where torch has them).
The PyTorch DCP storage backend is ``ckpt.torch.dcp``; the tiers for torch.distributed jobs
(memory, peer replicas, persistent store) are ``ckpt.torch.TieredCheckpointer`` (``ckpt.torch.tiers``).
"""

from __future__ import annotations

from typing import Dict, Optional

from .. import _tensors
from .._reader import safe_open
from ..numpy import _write


def save_file(tensors: Dict[str, "torch.Tensor"], filename, metadata: Optional[Dict[str, object]] = None, *,  # noqa: F821
              chunk_size_log2: Optional[int] = None) -> None:
    """Writes every tensor to ``filename`` atomically and durably, with a digest over every chunk."""
    _write(((name, _tensors.tensor_bytes(t)) for name, t in tensors.items()), filename, metadata, chunk_size_log2)


def load_file(filename, device: str = "cpu", *, step: Optional[int] = None,
              mmap: bool = True) -> Dict[str, "torch.Tensor"]:  # noqa: F821
    """Every tensor of a .ckpt file, step directory or store step, each byte verified, on ``device``
    (CPU tensors over a copy-on-write mapping where the layout allows, as safetensors'; ``mmap=False`` copies)."""
    with safe_open(filename, framework="torch", device=device, step=step, mmap=mmap) as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def save_model(model, filename, metadata: Optional[Dict[str, object]] = None) -> None:
    """Saves ``model.state_dict()`` (tensors only)."""
    save_file({k: v for k, v in model.state_dict().items()}, filename, metadata)


def load_model(model, filename, strict: bool = True, device: str = "cpu"):
    """Loads a file written by save_model into ``model``; returns load_state_dict's result."""
    return model.load_state_dict(load_file(filename, device=device), strict=strict)


def __getattr__(name):
    # The tiers import torch.distributed: only when asked for.
    if name in ("TieredCheckpointer", "TorchComm", "DeviceSnapshot"):
        from . import tiers

        return getattr(tiers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
