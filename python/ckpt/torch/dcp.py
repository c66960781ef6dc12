"""A PyTorch Distributed Checkpoint (DCP) storage backend on the ckpt store (spec/PYTHON.md 4).

``dcp.save(state_dict, storage_writer=StorageWriter(store))``, ``dcp.async_save(...)`` and
``dcp.load(state_dict, storage_reader=StorageReader(store))`` work unchanged. Each save is one step of
an ordinary ckpt store, written by the store's own commit protocol with the messages carried inside
DCP's plans (spec/SHARDING.md 3.6):

- every rank's ``prepare_local_plan`` adds its begin request to its plan;
- the coordinator's ``prepare_global_plan`` opens the store (lock, recovery), appends BEGIN, makes the
  step directory, and sends the begin decision back inside every rank's plan;
- every rank's ``write_data`` writes its own shard file ``shard-<r>-of-<N>.ckpt`` (DCP's chunks of a
  sharded tensor are the pieces of one tensor), finishes it durably and returns its shard report;
- the coordinator's ``finish`` writes the MANIFEST, holding DCP's metadata, and the COMMIT only once
  every rank's report says its shard is durable.

A save that fails anywhere leaves no COMMIT: the previous step stays the latest, and the coordinator's
next open (its next save, or any writable open) removes the unfinished step. ckpt-verify, ckpt-inspect,
ckpt-repair, ckpt-reshard and ckpt-merge work on the result; each byte dcp.load reads is verified.

``store_path`` may be ``s3://bucket/prefix``: the same phases run over the store on objects (spec/OBJECT.md
4.8): each rank uploads its shard object, and the coordinator's ``finish`` creates the step's commit object
(``If-None-Match: *``) only after every rank's report. On either store a step number is committed once while
it is live (spec/JOURNAL.md 10): retire it to save it again.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
from dataclasses import dataclass
from typing import Any, List, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   MetadataIndex, StorageMeta, TensorProperties,
                                                   TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import StorageReader as _StorageReader
from torch.distributed.checkpoint.storage import StorageWriter as _StorageWriter
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from .. import _ckpt, _tensors
from ..errors import InvalidArgumentError, NotFoundError

# The training-state key of the pickled DCP Metadata (spec/PYTHON.md 4.2).
METADATA_KEY = "dcp.metadata"
# The index of the write result that carries a rank's shard report to finish().
_REPORT_FQN = "__ckpt_shard_report__"


@dataclass(frozen=True)
class _LocalData:
    """What a rank's local plan carries to the coordinator."""

    rank: int  # ckpt rank: 0 is DCP's coordinator
    request: bytes


@dataclass(frozen=True)
class _GlobalData:
    """What the coordinator's global plan carries back to each rank."""

    decision: bytes


@dataclass(frozen=True)
class StoredChunk:
    """Where DCP's item is in the step: the tensor's name and the chunk's offsets in it."""

    name: str
    offsets: tuple


@dataclass(frozen=True)
class _Report:
    rank: int
    report: bytes


def _ckpt_rank(rank: int, coordinator: int, world: int) -> int:
    return (rank - coordinator) % world


class StorageWriter(_StorageWriter):
    """Writes DCP saves as steps of the ckpt store at ``store_path`` (created when missing).

    ``step``: the step number of the next save; default: one above the store's latest committed step
    (every rank reads it from the journal). Set ``writer.step`` between saves to reuse one writer.
    ``process_group`` and ``coordinator_rank``: as given to ``dcp.save`` (the ranks of the store's save
    are the group's ranks, counted from the coordinator). ``keep_last``/``keep_every``: retention.
    """

    def __init__(self, store_path, step: Optional[int] = None, *, process_group=None, coordinator_rank: int = 0,
                 keep_last: int = 0, keep_every: int = 0, chunk_size_log2: Optional[int] = None):
        super().__init__()
        self.path = os.fspath(store_path)
        self.step = step
        self._group = process_group
        self._coordinator_rank = coordinator_rank
        self._keep = (keep_last, keep_every)
        self._chunk_log2 = _ckpt.DEFAULT_CHUNK_SIZE_LOG2 if chunk_size_log2 is None else chunk_size_log2
        self._store = None
        self._tx = None
        self._save_step = None
        self.last_commit: Optional[dict] = None

    # --- DCP's StorageWriter -----------------------------------------------------------------------
    def reset(self, checkpoint_id=None) -> None:
        # A previous save that never reached finish() (a rank failed) is dropped here: DCP's collectives
        # have ended it on every rank, so rank 0 may remove its files.
        self._close_save()
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.path)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        initialized = dist.is_available() and dist.is_initialized()
        self._world = dist.get_world_size(self._group) if initialized else 1
        rank = kwargs.get("rank")
        if rank is None:
            rank = dist.get_rank(self._group) if initialized else 0
        if is_coordinator != (rank == self._coordinator_rank):
            raise InvalidArgumentError(f"rank {rank}: DCP's coordinator is not rank {self._coordinator_rank}: pass "
                                       "StorageWriter(coordinator_rank=...) as given to dcp.save")
        self._rank = _ckpt_rank(rank, self._coordinator_rank, self._world)
        self._is_coordinator = is_coordinator
        if self.step is None:
            self._save_step = _next_step(self.path)
        else:
            self._save_step = int(self.step)
        if not is_coordinator:  # a participant reads nothing at open (spec/SHARDING.md 3.6)
            self._store = _ckpt.Store.open_rank(self.path, self._rank, self._world, False, self._chunk_log2)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        if self._is_coordinator:
            # Rank 0's open comes first: lock and recovery, which also removes a save that failed before.
            self._close_save()
            self._store = _ckpt.Store.open_rank(self.path, 0, self._world, True, self._chunk_log2)
        request = self._store.begin_request(self._save_step)
        return dataclasses.replace(plan, storage_data=_LocalData(self._rank, request))

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        if len(plans) != self._world:
            raise InvalidArgumentError(f"{self.path}: {len(plans)} plans from a world of {self._world}")
        requests = [b""] * self._world
        for p in plans:
            requests[p.storage_data.rank] = p.storage_data.request
        decision = self._store.decide_begin(self._save_step, requests)
        # Rank 0 joins now, so a refused begin fails the save on every rank before anything is written.
        self._tx = self._store.join(decision)
        return [dataclasses.replace(p, storage_data=_GlobalData(decision)) for p in plans]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        if self._tx is None:
            self._tx = self._store.join(plan.storage_data.decision)
        tx = self._tx
        results = []
        for item in plan.items:
            data = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                name, offsets = item.index.fqn, (0,)
                tx.add_piece(name, "U8", [len(raw)], [0], [len(raw)], np.frombuffer(raw, dtype=np.uint8))
                size = len(raw)
            else:
                t = data.detach()
                chunk = item.tensor_data.chunk
                offsets = tuple(int(o) for o in chunk.offsets)
                dtype, shape, raw = _tensors.tensor_bytes(t)
                name = item.index.fqn
                tx.add_piece(name, dtype, [int(d) for d in item.tensor_data.size], list(offsets), list(shape), raw)
                size = raw.nbytes
            results.append(WriteResult(index=item.index, size_in_bytes=size, storage_data=StoredChunk(name, offsets)))
        report = tx.report()  # this rank's shard is durable, with its directory
        if not self._is_coordinator:
            self._tx = None
        results.append(WriteResult(index=MetadataIndex(_REPORT_FQN, [self._rank]), size_in_bytes=0,
                                   storage_data=_Report(self._rank, report)))
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        reports = [None] * self._world
        storage = {}
        for wr_list in results:
            for wr in wr_list:
                if isinstance(wr.storage_data, _Report):
                    reports[wr.storage_data.rank] = wr.storage_data.report
                else:
                    storage[wr.index] = wr.storage_data
        missing = [r for r, rep in enumerate(reports) if rep is None]
        if missing:
            self._close_save()
            raise InvalidArgumentError(f"{self.path}: no shard report from ranks {missing}: the step is abandoned")
        metadata.storage_data = storage
        metadata.storage_meta = self.storage_meta()
        self._tx.set_state({"values": {METADATA_KEY: pickle.dumps(metadata, protocol=pickle.HIGHEST_PROTOCOL)}})
        try:
            self.last_commit = self._tx.commit_reports(reports)
            keep_last, keep_every = self._keep
            if keep_last:
                self._store.apply_retention(keep_last, keep_every)
        finally:
            self._close_save()  # releases the writer lock until the next save

    # --- ---------------------------------------------------------------------------------------------
    def _close_save(self) -> None:
        if self._tx is not None:
            self._tx.close()  # unfinished: rank 0 writes ABORT and removes the step's files
            self._tx = None
        if self._store is not None and getattr(self, "_is_coordinator", False):
            self._store.close()
            self._store = None

    def close(self) -> None:
        self._close_save()
        if self._store is not None:
            self._store.close()
            self._store = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


def _next_step(path: str) -> int:
    """One above the store's latest committed step (0 for a store that does not exist yet)."""
    if path.startswith("s3://"):
        try:  # a store on objects (spec/OBJECT.md 4): a missing identity object is no store yet
            s = _ckpt.Store.open(path, True, False, 0, 0, _ckpt.DEFAULT_CHUNK_SIZE_LOG2, False)
        except NotFoundError:
            return 0
    elif not os.path.isdir(path) or not os.path.exists(os.path.join(path, "JOURNAL")):
        return 0
    else:
        s = _ckpt.Store.open(path, True, False, 0, 0, _ckpt.DEFAULT_CHUNK_SIZE_LOG2, False)
    try:
        latest = s.latest()
        return 0 if latest is None else latest["step"] + 1
    finally:
        s.close()


class StorageReader(_StorageReader):
    """Reads a step of the ckpt store at ``store_path`` (default: its latest) for ``dcp.load``. A step
    saved by another writer (ckpt's own, ckpt-reshard) loads too: its tensors are described to DCP as
    whole tensors. Every byte read is checked against its chunk digest; damage raises an error naming
    the file, tensor, chunk and byte range."""

    def __init__(self, store_path, step: Optional[int] = None):
        super().__init__()
        self.path = os.fspath(store_path)
        self.step = step
        self._reader = None
        self._storage = None

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self._reader = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    def _open(self):
        if self._reader is None:
            self._reader = _ckpt.Reader(self.path, self.step)
        return self._reader

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        reader = self._open()
        state = reader.state() or {}
        blob = state.get("values", {}).get(METADATA_KEY)
        if blob is not None:
            return pickle.loads(blob)
        return self._describe(reader)

    @staticmethod
    def _describe(reader) -> Metadata:
        """DCP metadata for a step DCP did not write: each tensor whole, one chunk."""
        md, storage = {}, {}
        for name, dtype, shape, _ in reader.tensors():
            size = torch.Size(shape)
            props = TensorProperties(dtype=_tensors.torch_dtype(dtype))
            md[name] = TensorStorageMetadata(properties=props, size=size,
                                             chunks=[ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)), sizes=size)])
            storage[MetadataIndex(name, [0] * len(shape))] = StoredChunk(name, (0,) * len(shape))
        return Metadata(state_dict_metadata=md, storage_data=storage)

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._storage = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        reader = self._open()
        info = {name: (dtype, tuple(shape)) for name, dtype, shape, _ in reader.tensors()}
        for req in plan.items:
            stored = self._storage[req.storage_index]
            if req.type == LoadItemType.BYTE_IO:
                dtype, shape = info[stored.name]
                out, raw = _tensors.numpy_empty("U8", shape)
                if raw is not None:
                    reader.read_into(stored.name, [0], list(shape), raw)
                planner.load_bytes(req, io.BytesIO(out.tobytes()))
                continue
            dtype, _ = info[stored.name]
            offsets = [int(a) + int(b) for a, b in zip(stored.offsets, req.storage_offsets)]
            lengths = [int(n) for n in req.lengths]
            loaded, raw = _tensors.torch_empty(dtype, lengths)
            if raw is not None:
                reader.read_into(stored.name, offsets, lengths, raw)
            target = planner.resolve_tensor(req).detach()
            if target.size() != loaded.size():
                raise InvalidArgumentError(f"{self.path}: tensor {stored.name!r}: the plan wants {tuple(target.size())} "
                                           f"at {offsets}, the step holds {tuple(loaded.size())}")
            target.copy_(loaded)
            planner.commit_tensor(req, target)
        fut: Future = Future()
        fut.set_result(None)
        return fut
