"""numpy arrays to and from .ckpt files, as ``safetensors.numpy`` does for .safetensors (spec/PYTHON.md 2.1)."""

from __future__ import annotations

import os
from typing import Dict, Optional

import numpy as np

from . import _ckpt, _tensors
from ._reader import safe_open


def save_file(tensors: Dict[str, np.ndarray], filename, metadata: Optional[Dict[str, object]] = None, *,
              chunk_size_log2: Optional[int] = None) -> None:
    """Writes every array to ``filename`` atomically and durably (temporary file, fsync, rename, fsync of
    the directory), with a digest over every chunk. ``metadata`` values may be str, int, float, bool or
    bytes, and keep their type."""
    _write(((name, _tensors.tensor_bytes(a)) for name, a in tensors.items()), filename, metadata, chunk_size_log2)


def load_file(filename, *, step: Optional[int] = None, mmap: bool = True) -> Dict[str, np.ndarray]:
    """Every tensor of a .ckpt file, step directory or store step, each byte verified (arrays over a
    copy-on-write mapping where the layout allows; ``mmap=False`` copies)."""
    with safe_open(filename, framework="numpy", step=step, mmap=mmap) as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def _write(items, filename, metadata, chunk_size_log2) -> None:
    w = _ckpt.FileWriter(os.fspath(filename), _ckpt.DEFAULT_ALIGNMENT_LOG2,
                         _ckpt.DEFAULT_CHUNK_SIZE_LOG2 if chunk_size_log2 is None else chunk_size_log2)
    try:
        for name, (dtype, shape, raw) in items:
            if not isinstance(name, str):
                raise TypeError(f"tensor names must be str, not {type(name).__name__}")
            w.add_tensor(name, dtype, list(shape), raw)
        for key, value in (metadata or {}).items():
            w.set_metadata(key, value)
        w.finish()
    finally:
        w.close()  # unfinished: the temporary file goes
