"""ckpt: crash-consistent, verified checkpoints (spec/PYTHON.md).

- ``ckpt.numpy`` / ``ckpt.torch``: ``save_file`` and ``load_file`` as in safetensors, every byte
  digested and verified, files written atomically and durably.
- ``ckpt.safe_open``: read tensors and slices by name, touching only the chunks a slice needs.
- ``ckpt.Store``: a write-ahead-logged store of steps with async save, retention and recovery.
- ``ckpt.torch.dcp``: a PyTorch Distributed Checkpoint storage backend on the store.
- ``ckpt.verify``, ``ckpt.inspect``, ``ckpt.root_digest``, ``ckpt.diff``, ``ckpt.write_sidecar``, ``ckpt.repair``:
  the reports ckpt-verify, ckpt-inspect, ckpt-diff and ckpt-repair print, decided and worded by the same library code.
"""

from . import _ckpt
from ._reader import TensorSlice, safe_open
from .errors import (CancelledError, CkptError, CkptIOError, ConflictError, CorruptError, IncompleteError,
                     IntegrityError, InvalidArgumentError, NotFoundError, SilentDataCorruptionError, UnsupportedError,
                     VersionError)
from .store import SaveTicket, Store, Transaction
from .report import Diff, Inspection, Problem, Repair, Report, VerifyReport, diff, inspect, repair, root_digest, verify, write_sidecar
from . import plan

__version__ = "0.1.0"
DTYPES = [name for name, _ in _ckpt.dtypes()]


def xxh3_64(data) -> int:
    """XXH3-64 of a bytes-like object, as the format digests chunks."""
    import numpy as np

    return _ckpt.xxh3_64(np.frombuffer(memoryview(data), dtype=np.uint8))


__all__ = ["safe_open", "TensorSlice", "Store", "Transaction", "SaveTicket", "verify", "inspect", "root_digest", "diff", "write_sidecar", "repair", "Report", "VerifyReport", "Repair",
           "Inspection", "Diff", "Problem",
           "CkptError", "IntegrityError", "CorruptError", "SilentDataCorruptionError", "IncompleteError", "VersionError", "NotFoundError",
           "InvalidArgumentError", "ConflictError", "UnsupportedError", "CancelledError", "CkptIOError", "DTYPES",
           "xxh3_64", "plan"]
