"""safe_open: any checkpoint (a .ckpt file, a step directory, a store's step) read the way safetensors'
safe_open reads a file (spec/PYTHON.md 2.2). Every byte returned was checked against its chunk digest;
a slice reads only the chunks it touches."""

from __future__ import annotations

import os
from typing import Dict, List, Optional

import numpy as np

from . import _ckpt, _tensors

_FRAMEWORKS = {"np": "numpy", "numpy": "numpy", "pt": "torch", "torch": "torch"}


def _framework(name: str) -> str:
    try:
        return _FRAMEWORKS[name]
    except KeyError:
        raise ValueError(f"framework must be one of {sorted(_FRAMEWORKS)}, not {name!r}") from None


class safe_open:  # noqa: N801 - the name safetensors users know
    """Opens a checkpoint for reading tensors by name.

    ``framework``: "numpy"/"np" or "torch"/"pt". ``device``: torch only, where tensors land ("cpu",
    "cuda:0"...). ``step``: a store's step (default: its latest). ``mmap`` (default, as safetensors):
    get_tensor returns arrays over a copy-on-write memory mapping where a tensor lies whole in one file,
    every chunk verified when it is mapped; writing to them changes this process's copy, never the file.
    Elsewhere, and with ``mmap=False``, the bytes are copied. A mapped file truncated by another process
    kills this one (SIGBUS), as with any mapping.
    """

    def __init__(self, path, framework: str = "numpy", device: str = "cpu", step: Optional[int] = None,
                 mmap: bool = True):
        self._framework = _framework(framework)
        self._device = device
        self._mmap = mmap
        self._reader = _ckpt.Reader(os.fspath(path), step)
        self._tensors = {name: (dtype, tuple(shape), nbytes) for name, dtype, shape, nbytes in self._reader.tensors()}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        self._reader.close()

    def keys(self) -> List[str]:
        """Tensor names, in the order the checkpoint lists them."""
        return list(self._tensors)

    def offset_keys(self) -> List[str]:
        return self.keys()

    def metadata(self) -> Dict[str, object]:
        """The files' typed metadata (int, float, bool, str, bytes values)."""
        return self._reader.metadata()

    def state(self) -> Optional[dict]:
        """The training state: a step's manifest state, or a file's saved one; None when there is none."""
        return self._reader.state()

    @property
    def step(self) -> Optional[int]:
        return self._reader.step()

    def _info(self, name: str):
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"{self._reader.description()}: no tensor {name!r}") from None

    def get_tensor(self, name: str):
        dtype, shape, nbytes = self._info(name)
        if self._mmap and nbytes:  # an empty tensor has no bytes to map
            view = self._reader.view(name)
            if view is not None:
                return self._wrap(view, dtype, shape)
        return self._read(name, dtype, (0,) * len(shape), shape)

    def _wrap(self, raw: np.ndarray, dtype: str, shape):
        """An array or tensor of dtype and shape over the uint8 bytes raw (no copy)."""
        if self._framework == "numpy":
            return raw.view(_tensors.numpy_dtype(dtype)).reshape(shape)
        import torch

        t = torch.from_numpy(raw).view(_tensors.torch_dtype(dtype)).reshape(shape)
        return t.to(self._device) if self._device != "cpu" else t

    def get_slice(self, name: str) -> "TensorSlice":
        dtype, shape, _ = self._info(name)
        return TensorSlice(self, name, dtype, shape)

    def _read(self, name, dtype, offsets, shape):
        if self._framework == "torch":
            out, raw = _tensors.torch_empty(dtype, shape)
        else:
            out, raw = _tensors.numpy_empty(dtype, shape)
        if raw is not None:
            self._reader.read_into(name, list(offsets), list(shape), raw)
        if self._framework == "torch" and self._device != "cpu":
            out = out.to(self._device)
        return out


class TensorSlice:
    """``f.get_slice(name)[a:b, :]``: reads the box the index selects, touching only its chunks."""

    def __init__(self, owner: safe_open, name: str, dtype: str, shape):
        self._owner, self._name, self._dtype, self._shape = owner, name, dtype, tuple(shape)

    def get_shape(self) -> List[int]:
        return list(self._shape)

    def get_dtype(self) -> str:
        return self._dtype

    @property
    def shape(self):
        return self._shape

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, index):
        if not isinstance(index, tuple):
            index = (index,)
        if any(i is Ellipsis for i in index):
            at = index.index(Ellipsis)
            fill = len(self._shape) - (len(index) - 1)
            index = index[:at] + (slice(None),) * fill + index[at + 1:]
        if len(index) > len(self._shape):
            raise IndexError(f"{len(index)} indices for a tensor of rank {len(self._shape)}")
        index = index + (slice(None),) * (len(self._shape) - len(index))
        offsets, box, post, squeeze = [], [], [], []
        for d, (i, extent) in enumerate(zip(index, self._shape)):
            if isinstance(i, slice):
                start, stop, step = i.indices(extent)
                if step < 0:  # read the box forwards, reverse it afterwards
                    lo = stop + 1 if stop >= -1 else 0
                    start, stop = lo, start + 1
                    count = max(0, stop - start)
                    offsets.append(start)
                    box.append(count)
                    post.append(slice(None, None, step) if count else slice(None))
                    continue
                count = max(0, stop - start)
                offsets.append(start if count else 0)
                box.append(count)
                post.append(slice(None, None, step) if step != 1 else slice(None))
            else:
                k = int(i)
                if k < 0:
                    k += extent
                if not 0 <= k < extent:
                    raise IndexError(f"index {i} is out of range for dimension {d} of size {extent}")
                offsets.append(k)
                box.append(1)
                post.append(slice(None))
                squeeze.append(d)
        out = self._owner._read(self._name, self._dtype, offsets, box)
        if any(p != slice(None) for p in post):
            out = out[tuple(post)]
        if squeeze:
            keep = [slice(None) if d not in squeeze else 0 for d in range(len(box))]
            out = out[tuple(keep)]
        return out
