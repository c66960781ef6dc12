"""The store from Python (spec/PYTHON.md 2.3): crash-consistent steps of tensors and training state,
the async save, retention and verification, over the C++ library's one commit protocol."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional

from . import _ckpt, _tensors
from ._reader import safe_open

_STATE_FIELDS = ("rng", "data_epoch", "data_offset", "data_state", "values")


def _state_fields(state: Optional[dict]) -> dict:
    """The training state a caller gives: rng (bytes), data_epoch, data_offset, data_state (bytes) and
    values (a dict of int, float, bool, str, bytes)."""
    if not state:
        return {}
    unknown = set(state) - set(_STATE_FIELDS) - {"step", "optimizer_tensors"}
    if unknown:
        raise ValueError(f"training state fields are {_STATE_FIELDS}; unknown: {sorted(unknown)}")
    return {k: v for k, v in state.items() if k in _STATE_FIELDS}


class Transaction:
    """One save in progress: add tensors and state, then ``commit()``. Leaving a ``with`` block by an
    exception (or closing without commit) abandons it; the previous step is untouched."""

    def __init__(self, native):
        self._tx = native

    @property
    def step(self) -> int:
        return self._tx.step

    @property
    def directory(self) -> str:
        return self._tx.directory

    def add_tensor(self, name: str, tensor, *, optimizer: bool = False) -> None:
        dtype, shape, raw = _tensors.tensor_bytes(tensor)
        self._tx.add_tensor(name, dtype, list(shape), raw, optimizer)

    def add_piece(self, name: str, tensor, global_shape, offsets) -> None:
        """One rank's piece of a larger tensor, at ``offsets`` in a tensor of ``global_shape``."""
        dtype, shape, raw = _tensors.tensor_bytes(tensor)
        self._tx.add_piece(name, dtype, list(global_shape), list(offsets), list(shape), raw)

    def set_state(self, **fields) -> None:
        self._tx.set_state(_state_fields(fields))

    def state(self) -> dict:
        return self._tx.state()

    def commit(self) -> dict:
        return self._tx.commit()

    def abort(self) -> None:
        self._tx.abort()

    def close(self) -> None:
        self._tx.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self._tx.close()  # drops it unless committed or aborted
        return False


@dataclass
class SaveTicket:
    step: int
    skipped: bool
    stall_seconds: float


class Store:
    """A directory of crash-consistent steps (spec/JOURNAL.md).

    ``read_only``: open without the writer lock (readers never block the writer). ``create``: make the
    store when missing. ``keep_last``/``keep_every``: retention after each commit (the latest step is
    always kept). ``verify_written``: read every shard back and verify it before committing.
    """

    def __init__(self, path, *, read_only: bool = False, create: bool = True, keep_last: int = 0, keep_every: int = 0,
                 chunk_size_log2: Optional[int] = None, verify_written: bool = False):
        self.path = os.fspath(path)
        self._store = _ckpt.Store.open(self.path, read_only, create and not read_only, keep_last, keep_every,
                                       _ckpt.DEFAULT_CHUNK_SIZE_LOG2 if chunk_size_log2 is None else chunk_size_log2,
                                       verify_written)
        self._saver = None

    # --- reading -------------------------------------------------------------------------------
    def steps(self) -> List[int]:
        """Committed, not retired step numbers, in commit order."""
        return [s["step"] for s in self._store.steps()]

    def step_info(self) -> List[dict]:
        return self._store.steps()

    def latest(self) -> Optional[int]:
        s = self._store.latest()
        return None if s is None else s["step"]

    def refresh(self) -> None:
        """Read-only stores: see steps committed since open."""
        self._store.refresh()

    def open_step(self, step: Optional[int] = None, framework: str = "numpy", device: str = "cpu") -> safe_open:
        """A reader of one step (default: the latest), every byte verified as it is read."""
        return safe_open(self.path, framework=framework, device=device, step=step if step is not None else self._latest())

    def load(self, step: Optional[int] = None, framework: str = "numpy", device: str = "cpu"):
        """``(tensors, state)`` of a step (default: the latest)."""
        with self.open_step(step, framework, device) as f:
            return {k: f.get_tensor(k) for k in f.keys()}, f.state()

    def _latest(self) -> int:
        s = self.latest()
        if s is None:
            from .errors import NotFoundError

            raise NotFoundError(f"{self.path}: no committed step")
        return s

    # --- writing -------------------------------------------------------------------------------
    def begin(self, step: int) -> Transaction:
        return Transaction(self._store.begin(step))

    def save(self, step: int, tensors: Dict[str, object], state: Optional[dict] = None,
             optimizer: Optional[Dict[str, object]] = None) -> dict:
        """One synchronous save: every tensor, the optimizer tensors, the state; returns the commit."""
        with self.begin(step) as tx:
            for name, t in tensors.items():
                tx.add_tensor(name, t)
            for name, t in (optimizer or {}).items():
                tx.add_tensor(name, t, optimizer=True)
            if state:
                tx.set_state(**state)
            return tx.commit()

    def save_async(self, step: int, tensors: Dict[str, object], state: Optional[dict] = None,
                   optimizer: Optional[Dict[str, object]] = None, *, staging_bytes: Optional[int] = None,
                   max_in_flight: int = 1, skip_when_busy: bool = False) -> SaveTicket:
        """Blocks only while the tensors are copied into staging memory (spec/ASYNC.md); the write, fsync
        and commit run behind. ``wait()`` for durability. The tensors may change once this returns. The
        first call allocates and pre-faults the staging memory (the state's size, or ``staging_bytes``)
        unless ``prepare_async`` did; a later, larger state streams through it."""
        request = _ckpt.SaveRequest(step)
        total = 0
        for table, opt in ((tensors, False), (optimizer or {}, True)):
            for name, t in table.items():
                dtype, shape, raw = _tensors.tensor_bytes(t)
                request.add_tensor(name, dtype, list(shape), raw, opt)
                total += raw.nbytes
        if state:
            request.set_state(_state_fields(state))
        if self._saver is None:
            self.prepare_async(staging_bytes or max(total, 16 << 20), max_in_flight=max_in_flight,
                               skip_when_busy=skip_when_busy)
        t = self._saver.save(request)
        return SaveTicket(t["step"], t["skipped"], t["stall_seconds"])

    def prepare_async(self, staging_bytes: int, *, max_in_flight: int = 1, skip_when_busy: bool = False) -> None:
        """Allocates and pre-faults save_async's staging memory now, as a training loop does once before
        its first step, so that no save pays for it. Replaces an earlier saver (after its saves commit)."""
        if self._saver is not None:
            self._saver.close()
        self._saver = _ckpt.AsyncSaver(self._store, staging_bytes, max_in_flight, skip_when_busy)

    def wait(self) -> None:
        """Until every async save has committed; raises the first failure."""
        if self._saver is not None:
            self._saver.wait()

    def retire(self, step: int) -> None:
        self._store.retire(step)

    def apply_retention(self, keep_last: int, keep_every: int = 0) -> List[int]:
        """Retires what the policy does not keep; returns the retired steps."""
        return self._store.apply_retention(keep_last, keep_every)

    def verify(self, step: Optional[int] = None, threads: int = 1):
        """Every chunk of a step (default: every live step) checked; returns a VerifyReport."""
        from .report import verify

        return verify(self.path, step=step, threads=threads)

    def recovery(self) -> dict:
        """What the writable open found and did."""
        return self._store.recovery()

    def close(self) -> None:
        if self._saver is not None:
            self._saver.close()
            self._saver = None
        self._store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
