"""Tensors as bytes, for the extension (spec/PYTHON.md 2): numpy and torch arrays of every dtype ckpt
has are viewed as C-contiguous uint8 buffers without a copy (bfloat16 and fp8 included), and the
dtype names are the safetensors spellings the format uses."""

from __future__ import annotations

import numpy as np

# numpy dtypes by ckpt name; bfloat16 and fp8 come from ml_dtypes when it is installed.
_NUMPY = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8), "U16": np.dtype(np.uint16),
    "I16": np.dtype(np.int16), "U32": np.dtype(np.uint32), "I32": np.dtype(np.int32), "U64": np.dtype(np.uint64),
    "I64": np.dtype(np.int64), "F16": np.dtype(np.float16), "F32": np.dtype(np.float32), "F64": np.dtype(np.float64),
    "C64": np.dtype(np.complex64),
}
try:  # optional: numpy has no bfloat16 or fp8 of its own
    import ml_dtypes as _ml

    _NUMPY["BF16"] = np.dtype(_ml.bfloat16)
    _NUMPY["F8_E4M3"] = np.dtype(_ml.float8_e4m3fn)
    _NUMPY["F8_E5M2"] = np.dtype(_ml.float8_e5m2)
    if hasattr(_ml, "float8_e8m0fnu"):
        _NUMPY["F8_E8M0"] = np.dtype(_ml.float8_e8m0fnu)
except ImportError:  # pragma: no cover - depends on the environment
    pass
_NUMPY_NAME = {v: k for k, v in _NUMPY.items()}


def numpy_dtype(name: str) -> np.dtype:
    try:
        return _NUMPY[name]
    except KeyError:
        raise TypeError(f"dtype {name} has no numpy equivalent here (install ml_dtypes for BF16 and F8)") from None


def numpy_name(dtype: np.dtype) -> str:
    try:
        return _NUMPY_NAME[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"numpy dtype {dtype} is not a ckpt dtype") from None


def numpy_bytes(a: np.ndarray) -> np.ndarray:
    """The array's bytes, row-major, as a 1-D uint8 array (a view when it is C-contiguous)."""
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.uint8) if a.size else np.empty(0, np.uint8)


_TORCH = None


def _torch_table():
    global _TORCH
    if _TORCH is None:
        import torch

        table = {
            "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
            "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
            "F64": torch.float64, "C64": torch.complex64,
        }
        for name, attr in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"), ("F8_E4M3", "float8_e4m3fn"),
                           ("F8_E5M2", "float8_e5m2"), ("F8_E8M0", "float8_e8m0fnu")):
            if hasattr(torch, attr):
                table[name] = getattr(torch, attr)
        _TORCH = (table, {v: k for k, v in table.items()})
    return _TORCH


def torch_dtype(name: str):
    try:
        return _torch_table()[0][name]
    except KeyError:
        raise TypeError(f"dtype {name} has no torch equivalent in this torch") from None


def torch_name(dtype) -> str:
    try:
        return _torch_table()[1][dtype]
    except KeyError:
        raise TypeError(f"torch dtype {dtype} is not a ckpt dtype") from None


def torch_bytes(t) -> np.ndarray:
    """A CPU tensor's bytes as a 1-D uint8 numpy array; CUDA tensors are copied through the host."""
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.to("cpu")
    t = t.contiguous()
    if t.numel() == 0:
        return np.empty(0, np.uint8)
    flat = t.reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    return flat.view(torch.uint8).numpy()


def tensor_bytes(x):
    """(ckpt dtype name, shape, uint8 bytes) of a numpy array or a torch tensor."""
    if isinstance(x, np.ndarray) or np.isscalar(x):
        a = np.asarray(x)
        return numpy_name(a.dtype), tuple(int(d) for d in a.shape), numpy_bytes(a)
    mod = type(x).__module__
    if mod.startswith("torch"):
        return torch_name(x.dtype), tuple(int(d) for d in x.shape), torch_bytes(x)
    raise TypeError(f"expected a numpy array or a torch tensor, got {type(x).__name__}")


def torch_empty(name: str, shape):
    """An uninitialised CPU tensor and the writable uint8 view of its bytes (None when it is empty)."""
    import torch

    t = torch.empty(tuple(shape), dtype=torch_dtype(name))
    return t, (_writable_bytes(t) if t.numel() else None)


def _writable_bytes(t):
    """The writable uint8 numpy view of a contiguous CPU tensor's bytes."""
    import torch

    flat = t.reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    return flat.view(torch.uint8).numpy()


def torch_target(t, name: str, shape):
    """The writable uint8 view of a live tensor's bytes when it can take a tensor of this dtype and shape in place
    (on the host, contiguous, its own bytes; not empty); else None."""
    if (t.device.type != "cpu" or t.dtype != torch_dtype(name) or tuple(t.shape) != tuple(shape) or not t.is_contiguous()
            or t.numel() == 0 or t.requires_grad):
        return None
    return _writable_bytes(t)


def numpy_empty(name: str, shape):
    a = np.empty(tuple(shape), dtype=numpy_dtype(name))
    return a, (a.reshape(-1).view(np.uint8) if a.size else None)
