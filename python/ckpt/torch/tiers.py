"""Recovery in seconds for torch.distributed jobs (spec/TIERS.md, spec/PYTHON.md 6).

``TieredCheckpointer`` keeps the latest steps in a node-local memory store, replicates each rank's
shard to peers on other nodes over a gloo group of its own, promotes a step now and then to a
persistent store, and at start agrees with every rank on the newest step whose every shard verifies.
Every decision is the C++ library's (``ckpt::tiers::TieredCheckpointer``); this module only turns a
model, an optimizer, a scheduler, RNGs and a data position into tensors and training state, and back.

    tiers = TieredCheckpointer(model, optimizer, scheduler, data=loader_state,
                               memory_root="/dev/shm/ckpt-job42", persistent="/lustre/job42/ckpt",
                               memory_every=10, persist_every=500)
    for step in range(tiers.resume(), total_steps):   # collective; 0 when there is nothing to resume
        train(step)
        tiers.step(step)                              # blocks only for the staging copy
    tiers.close()

Data parallel: every rank holds the whole model, so each saves a 1/W piece of every flattened tensor
(its range of the global 1-D view) and resumes by reading whole tensors, which gathers the pieces of
every shard of the agreed step (``load_all_shards``).
"""

from __future__ import annotations

import atexit
import ctypes
import pickle
import random
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

from .. import _ckpt, _tensors
from .. import errors as _ckpt_errors

_SKELETON_KEY = "ckpt.torch.skeleton"  # the pickled structure of the state dicts, tensors named, not included
_DEFAULT_CHUNK_SIZE_LOG2 = _ckpt.DEFAULT_CHUNK_SIZE_LOG2


class _sdc_raised:
    """The canary's finding (a CorruptError saying "silent data corruption") raised as SilentDataCorruptionError."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if isinstance(value, _ckpt_errors.CorruptError) and "silent data corruption" in str(value) and \
                not isinstance(value, _ckpt_errors.SilentDataCorruptionError):
            raise _ckpt_errors.SilentDataCorruptionError(str(value), getattr(value, "problem", None)) from value
        return False


@dataclass(frozen=True)
class _TensorRef:
    """Where a tensor was in a state dict: its name among the step's tensors, its dtype and shape."""

    name: str
    dtype: str
    shape: Tuple[int, ...]


@dataclass
class Resumed:
    """What the job resumed from, as every rank agreed (``ckpt::tiers::Resumed``)."""

    fresh: bool
    step: int
    next_step: int
    digest: str
    world: int
    sources: List[str] = field(default_factory=list)   # for each shard this rank loaded: where from
    setbacks: List[str] = field(default_factory=list)  # copies set aside and steps that failed, in order
    verified_bytes: int = 0  # shard bytes this rank read back and hashed to verify (each shard on one rank)


class TorchComm:
    """The collectives of the library's communicator (``Comm`` in comm.hpp) over a torch.distributed gloo
    group, as uint8 tensors, sizes first. The tiers only bootstrap their gloo communicators through it
    (spec/TIERS.md 4.7): after the constructor, no tier byte or message goes through Python."""

    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self._global = [dist.get_global_rank(group, r) for r in range(self.size)]

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def gather(self, data, root: int):
        mine = torch.from_numpy(np.asarray(data, dtype=np.uint8))
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        dist.all_gather(sizes, torch.tensor([mine.numel()], dtype=torch.int64), group=self.group)
        lengths = [int(s.item()) for s in sizes]
        longest = max(max(lengths), 1)  # gather needs equal sizes: pad to the longest
        padded = torch.zeros(longest, dtype=torch.uint8)
        padded[: mine.numel()] = mine
        if self.rank == root:
            parts = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.size)]
            dist.gather(padded, parts, dst=self._global[root], group=self.group)
            return [p[:n].numpy() for p, n in zip(parts, lengths)]
        dist.gather(padded, None, dst=self._global[root], group=self.group)
        return []

    def broadcast(self, data, root: int):
        size = torch.tensor([0 if data is None else len(data)], dtype=torch.int64)
        dist.broadcast(size, src=self._global[root], group=self.group)
        n = int(size.item())
        if n == 0:
            return np.empty(0, np.uint8)
        buf = torch.from_numpy(np.asarray(data, dtype=np.uint8)) if self.rank == root else torch.empty(n, dtype=torch.uint8)
        dist.broadcast(buf, src=self._global[root], group=self.group)
        return buf.numpy()


class DeviceSnapshot:
    """The library's device copier (``SnapshotCopier``, spec/ASYNC.md 6) over torch: the memory tier's slots are
    registered with CUDA (``pin``; a staging pool of pinned host memory where a slot cannot be mapped), device
    pieces are copied into them by ``copy_(non_blocking=True)`` on a side
    stream that first waits for the current stream, and ``fence()`` synchronizes that stream. The
    library passes addresses; ``register`` maps a piece's address back to its tensor for one step."""

    def __init__(self):
        self._blocks: Dict[int, torch.Tensor] = {}   # staging or slot address -> pinned uint8 tensor
        self._registered: set = set()                # slot addresses registered with CUDA
        self._sources: List[Tuple[int, int, torch.Tensor]] = []  # (address, bytes, uint8 view) of this step
        self._streams: Dict[torch.device, Any] = {}
        self._used: set = set()

    def allocate(self, nbytes: int) -> int:
        block = torch.empty(nbytes, dtype=torch.uint8, pin_memory=torch.cuda.is_available())
        self._blocks[block.data_ptr()] = block
        return block.data_ptr()

    def release(self, address: int) -> None:
        self._blocks.pop(address, None)

    def pin(self, address: int, nbytes: int) -> None:
        """A memory-tier slot (mapped by the library) the copies land in directly (spec/ASYNC.md 6.1): viewed as
        a uint8 tensor and registered with CUDA (``cudaHostRegister``) so device-to-host copies run at full speed."""
        # Known as a target first: memory CUDA will not register still takes the copies, more slowly (the library
        # notes the failure raised below and goes on).
        self._blocks[address] = torch.frombuffer((ctypes.c_ubyte * nbytes).from_address(address), dtype=torch.uint8)
        if torch.cuda.is_available():
            err = torch.cuda.cudart().cudaHostRegister(address, nbytes, 0)
            if int(err) != 0:
                raise RuntimeError(f"cudaHostRegister of {nbytes} bytes at {address:#x} failed: error {int(err)}")
            self._registered.add(address)

    def unpin(self, address: int) -> None:
        self._blocks.pop(address, None)
        if address in self._registered:
            for stream in self._streams.values():
                stream.synchronize()  # no copy may still target the slot
            torch.cuda.cudart().cudaHostUnregister(address)
            self._registered.discard(address)

    def handles(self, t: torch.Tensor) -> bool:
        """Whether the library copies this tensor through the copier (else from host memory, itself)."""
        return t.is_cuda

    def register(self, flat: torch.Tensor) -> Tuple[int, int]:
        """A 1-D uint8 view of device memory, kept referenced until ``done()``; returns (address, bytes)."""
        self._sources.append((flat.data_ptr(), flat.numel(), flat))
        if flat.is_cuda and flat.device not in self._streams:
            self._streams[flat.device] = torch.cuda.Stream(device=flat.device)
        return flat.data_ptr(), flat.numel()

    def begin(self) -> None:
        # The side streams copy what the training stream has computed so far, not an earlier value.
        for device, stream in self._streams.items():
            stream.wait_stream(torch.cuda.current_stream(device))

    def done(self) -> None:
        self._sources.clear()
        self._used.clear()

    def _find(self, address: int, nbytes: int, table) -> Tuple[torch.Tensor, int]:
        for base, size, t in table:
            if base <= address and address + nbytes <= base + size:
                return t, address - base
        raise RuntimeError(f"address {address:#x} (+{nbytes}) is in no registered buffer")

    def copy(self, staging: int, source: int, nbytes: int) -> None:
        blocks = [(base, t.numel(), t) for base, t in self._blocks.items()]
        dst, d_off = self._find(staging, nbytes, blocks)
        src, s_off = self._find(source, nbytes, self._sources)
        dst_view, src_view = dst[d_off:d_off + nbytes], src[s_off:s_off + nbytes]
        if src.is_cuda:
            stream = self._streams[src.device]
            with torch.cuda.stream(stream):
                dst_view.copy_(src_view, non_blocking=True)
            self._used.add(src.device)
        else:
            dst_view.copy_(src_view)

    def fence(self) -> None:
        for device in list(self._used):
            self._streams[device].synchronize()
        self._used.clear()


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes as a 1-D uint8 tensor on its device (a view when it is contiguous)."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    return flat.view(torch.uint8)


def _child(prefix: str, key) -> str:
    return f"{prefix}/{key}" if prefix else str(key)


def _rebuild(obj: dict, items) -> dict:
    """A dict like obj (an OrderedDict keeps its class and a state dict's ``_metadata``)."""
    out = OrderedDict(items) if isinstance(obj, OrderedDict) else dict(items)
    if hasattr(obj, "_metadata"):
        out._metadata = obj._metadata
    return out


def _split(obj, prefix: str, tensors: List[Tuple[str, torch.Tensor]]):
    """The structure of a state dict with every tensor replaced by a _TensorRef named by its path."""
    if isinstance(obj, torch.Tensor):
        tensors.append((prefix, obj))
        return _TensorRef(prefix, _tensors.torch_name(obj.dtype), tuple(int(d) for d in obj.shape))
    if isinstance(obj, dict):
        return _rebuild(obj, ((k, _split(v, _child(prefix, k), tensors)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_split(v, _child(prefix, i), tensors) for i, v in enumerate(obj))
    return obj


def _fill(obj, loaded: Dict[str, torch.Tensor]):
    if isinstance(obj, _TensorRef):
        return loaded[obj.name]
    if isinstance(obj, dict):
        return _rebuild(obj, ((k, _fill(v, loaded)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_fill(v, loaded) for v in obj)
    return obj


def _refs(obj, out: List[_TensorRef]) -> List[_TensorRef]:
    if isinstance(obj, _TensorRef):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _refs(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _refs(v, out)
    return out


def _part(name: str) -> str:
    return name.split("/", 1)[0]


def _check_optimizer_groups(skeleton, parts_live, step: int) -> None:
    """Refuses a step whose optimizer parameter groups differ from the live optimizer's (the structure
    Optimizer.load_state_dict checks) before any byte of it is applied: the model's part would otherwise be
    loaded first and stay loaded when the optimizer's is refused."""
    held = parts_live.get("optim")
    if held is None:
        return
    saved = skeleton.get("optim") if isinstance(skeleton, dict) else None
    mine = [len(g.get("params", ())) for g in held.get("param_groups", ())]
    theirs = [len(g.get("params", ())) for g in saved.get("param_groups", ())] if isinstance(saved, dict) else None
    if theirs != mine:
        raise ValueError(f"step {step}: the optimizer's parameter groups hold {mine} parameters, the step's "
                         f"{'none' if theirs is None else theirs}")


def _in_place_targets(live: List[Tuple[str, torch.Tensor]], refs: List[_TensorRef]) -> Dict[str, torch.Tensor]:
    """The live tensors a step's bytes may be read into: those of each part (model, optim, sched) whose live tensor
    names are exactly the step's; the rest of the step goes into new tensors."""
    live_names: Dict[str, set] = {}
    step_names: Dict[str, set] = {}
    for name, _ in live:
        live_names.setdefault(_part(name), set()).add(name)
    for r in refs:
        step_names.setdefault(_part(r.name), set()).add(r.name)
    complete = {p for p, names in step_names.items() if live_names.get(p) == names}
    return {name: t for name, t in live if _part(name) in complete}


def _rng_state() -> bytes:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def _set_rng_state(raw: bytes) -> None:
    state = pickle.loads(raw)  # the job's own verified state (spec/PYTHON.md 6.3)
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def topology_text(topology, world: int) -> str:
    """The library's topology map ("RANK NODE [RACK]" lines) from a list of node names (one per rank),
    a list of (node, rack) pairs, a dict rank -> node, or the text itself."""
    if topology is None:
        return ""
    if isinstance(topology, str):
        return topology
    items = topology.items() if isinstance(topology, dict) else enumerate(topology)
    lines = []
    for rank, where in items:
        node, rack = (where, None) if isinstance(where, str) else where
        lines.append(f"{rank} {node}" + (f" {rack}" if rack else ""))
    return "\n".join(lines) + "\n"


class TieredCheckpointer:
    """The tiers for a data-parallel torch.distributed job (every rank holds the whole model).

    Construct it on every rank of the default group (``dist.new_group`` is collective there); it makes
    a gloo group over the ranks of ``process_group`` (default: the world) only to connect the tiers' own
    gloo communicators in C++, which carry all tier traffic without the interpreter (spec/TIERS.md 4.7),
    so the training's collectives never interleave with it and the GIL never slows it. Ranks reach each
    other at this host's name, or at the interface ``CKPT_GLOO_IFACE`` or ``GLOO_SOCKET_IFNAME`` names. ``data`` is an object with
    ``state_dict()`` / ``load_state_dict()`` (a stateful sampler or loader), or give the two callables
    ``data_state`` / ``load_data_state``; its ``epoch`` and ``offset`` entries, when ints, are also the
    step's data position. ``topology``: one node name per rank (or see ``topology_text``); default:
    each rank's hostname is its node. ``device_snapshots``: copy CUDA tensors device-to-host straight
    into the memory tier's slot, pinned, on a side stream (default: when the model has CUDA tensors); a DeviceSnapshot
    instance is used as the copier. ``when_busy``: a capture due while the previous one is still in the
    background is "skip"ped (recorded, counted in ``steps_skipped``; the training loop never waits for
    the background) or "wait"s for it; every rank must pass the same. ``replicated``: names of state-dict
    entries (as the step names them, e.g. ``"model/norm.weight"``) that every rank holds bit-identical and
    saves whole, written by rank 0: at each capture every rank's digests of them are compared (the SDC
    canary, spec/TIERS.md 11), and a disagreement raises ``ckpt.SilentDataCorruptionError`` from the next
    ``step()`` or ``wait()``; relaunched, the job resumes the newest step every rank agreed on.
    ``compare_live``: every rank saves 1/W of each tensor but holds all of it; the rank that keeps a peer's
    replica hashes its own live copy of the range that peer saves at each capture (a pass over 1/W of the
    state per replica, inside ``step()``) and the canary compares it with the peer's digests (default on).
    ``parity``:
    ``(nodes, losses)``: instead of replicas, groups of ``nodes`` nodes keep Reed-Solomon parity of each
    other's shards (ISA-L), so any ``losses`` nodes of a group may be lost and their shards are rebuilt at
    resume, for ``losses / (nodes - losses)`` of a shard per rank (spec/TIERS.md 12).
    ``background_nice``: the nice value (0 to 19) of the tiers' background threads (the saver's worker with
    its replication, the promoter, the refill), so that with every core busy the training threads win them;
    0 runs them as the caller (spec/ASYNC.md 1).
    """

    def __init__(self, model, optimizer=None, scheduler=None, *, memory_root: str, persistent: Optional[str] = None,
                 memory_every: int = 1, persist_every: int = 0, replicas: int = 1, memory_keep: int = 2,
                 persistent_keep: int = 0, topology=None, process_group=None, data=None,
                 data_state: Optional[Callable[[], Any]] = None, load_data_state: Optional[Callable[[Any], None]] = None,
                 chunk_size_log2: Optional[int] = None, staging_bytes: int = 0, transfer_block: int = 16 << 20,
                 check_free_space: bool = True, device_snapshots: Optional[bool] = None,
                 on_phase: Optional[Callable[[str, int], None]] = None, when_busy: str = "skip",
                 replicated=(), parity: Optional[Tuple[int, int]] = None, compare_live: bool = True,
                 background_nice: int = 10):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("TieredCheckpointer needs torch.distributed initialized (torchrun, init_process_group)")
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self._replicated = frozenset(replicated)
        if parity:
            replicas = 0  # parity groups replace replicas (spec/TIERS.md 12)
        if data is not None:
            data_state, load_data_state = data.state_dict, data.load_state_dict
        self._data_state, self._load_data_state = data_state, load_data_state
        ranks = dist.get_process_group_ranks(process_group) if process_group is not None else list(range(dist.get_world_size()))
        self.group = dist.new_group(ranks=ranks, backend="gloo")
        self.comm = TorchComm(self.group)
        if device_snapshots is None:
            device_snapshots = any(t.is_cuda for t in model.state_dict().values() if isinstance(t, torch.Tensor))
        self._copier = device_snapshots if isinstance(device_snapshots, DeviceSnapshot) else \
            DeviceSnapshot() if device_snapshots else None
        self.resumed: Optional[Resumed] = None
        self._load_failure: Optional[BaseException] = None
        self._native = _ckpt.Tiers(
            self.comm, self.comm.rank, self.comm.size, str(memory_root), "" if persistent is None else str(persistent),
            memory_every, persist_every, replicas, memory_keep, persistent_keep, topology_text(topology, self.comm.size),
            _DEFAULT_CHUNK_SIZE_LOG2 if chunk_size_log2 is None else chunk_size_log2, staging_bytes, transfer_block,
            check_free_space, True, self._copier, on_phase, when_busy,
            *((int(parity[0]), int(parity[1])) if parity else (0, 1)), int(background_nice))
        # The canary on the data-parallel layout (spec/TIERS.md 11.1): the ranks whose replicas this rank keeps,
        # whose saved ranges it holds live too.
        holders = self._native.placement()["holders"] if compare_live else []
        self._live_from = [s for s, hs in enumerate(holders) if self.comm.rank in hs]
        # Closed before the interpreter finalizes, also when the job ends on an exception without close():
        # the saver's worker may be about to call a Python hook (on_phase, the device copier), and a thread
        # that takes the GIL during finalization is ended by the interpreter, which aborts a C++ thread.
        self._close_at_exit = _closer(weakref.ref(self))
        atexit.register(self._close_at_exit)

    # --- what a step holds -------------------------------------------------------------------------

    def _state_dicts(self) -> Dict[str, Any]:
        parts: Dict[str, Any] = {"model": self.model.state_dict()}
        if self.optimizer is not None:
            parts["optim"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            parts["sched"] = self.scheduler.state_dict()
        return parts

    def _live(self, tensors: List[Tuple[str, torch.Tensor]]):
        """The ranges other ranks save of every flattened CPU tensor, as this rank holds them live, for the ranks
        whose replicas this rank keeps: the canary compares them with what their owners save (spec/TIERS.md 11.1)."""
        world, live = self.comm.size, []
        for name, t in tensors:
            if name in self._replicated or t.is_cuda:
                continue
            n = t.numel()
            for owner in self._live_from:
                begin, end = n * owner // world, n * (owner + 1) // world
                if begin < end:
                    live.append((name, [begin], _tensors.torch_bytes(t.reshape(-1)[begin:end]), owner))
        return live

    def _pieces(self, tensors: List[Tuple[str, torch.Tensor]]):
        """This rank's 1/W range of every flattened tensor, as pieces of the global 1-D view."""
        rank, world = self.comm.rank, self.comm.size
        pieces = []
        for name, t in tensors:
            dtype = _tensors.torch_name(t.dtype)
            n = t.numel()
            if name in self._replicated and not (self._copier is not None and self._copier.handles(t)):
                # Whole on every rank, written by rank 0: the canary compares every rank's copy (spec/TIERS.md 11.1).
                pieces.append((name, dtype, [n], [0], [n], _tensors.torch_bytes(t.reshape(-1)), name.startswith("optim/"), 0))
                continue
            begin, end = n * rank // world, n * (rank + 1) // world
            if begin == end and not (n == 0 and rank == 0):
                continue  # nothing of this tensor here; an empty tensor is rank 0's
            optimizer = name.startswith("optim/")
            if self._copier is not None and self._copier.handles(t):
                flat = _flat_bytes(t.reshape(-1)[begin:end])
                data = self._copier.register(flat)
            else:
                data = _tensors.torch_bytes(t.reshape(-1)[begin:end])
            pieces.append((name, dtype, [n], [begin], [end - begin], data, optimizer))
        return pieces

    # --- the loop -----------------------------------------------------------------------------------

    def action(self, step: int) -> str:
        """What the policy does at ``step``: "none", "capture" or "capture_and_persist"."""
        return self._native.action(step)

    def step(self, step: int) -> str:
        """Call after every training step. When the policy captures it, the state is staged before this
        returns (device tensors copied into pinned staging, then fenced); replication and promotion go
        on in the background. An earlier step's background failure is raised here. Returns the action
        taken, or "skipped" when the previous capture was still in the background (when_busy "skip")."""
        if self._native.action(step) == "none":
            with _sdc_raised():
                return self._native.step(step, [], {})["action"]  # surfaces a background failure
        tensors: List[Tuple[str, torch.Tensor]] = []
        skeleton = _split(self._state_dicts(), "", tensors)
        state = {"rng": _rng_state(), "values": {_SKELETON_KEY: pickle.dumps(skeleton, protocol=pickle.HIGHEST_PROTOCOL)}}
        if self._data_state is not None:
            # The data position: the loader's state pickled whole, its epoch and offset also as the step's fields.
            data = self._data_state()
            state["data_state"] = pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
            if isinstance(data, dict):
                for key, field_name in (("epoch", "data_epoch"), ("offset", "data_offset")):
                    if isinstance(data.get(key), int) and data[key] >= 0:
                        state[field_name] = data[key]
        pieces = self._pieces(tensors)
        live = self._live(tensors) if self._live_from else []
        if self._copier is not None:
            self._copier.begin()
        try:
            with _sdc_raised():
                out = self._native.step(step, pieces, state, live)
            return "skipped" if out["skipped"] else out["action"]
        finally:
            if self._copier is not None:
                self._copier.done()

    def wait(self) -> None:
        """Blocks until every captured step is committed, replicated and (when due) persisted."""
        with _sdc_raised():
            self._native.wait()

    def resume(self) -> int:
        """Collective, before the first ``step()``: agrees with every rank on the newest step whose every
        shard verifies, loads it into the model, optimizer, scheduler, RNGs and data position, and
        returns the step to continue from (0 when there is nothing to resume)."""
        self._load_failure = None
        try:
            out = self._native.resume(self._load)
        except _ckpt_errors.CkptError as e:
            if self._load_failure is None:
                raise
            raise e from self._load_failure  # why this rank's load callback refused a step
        self.resumed = Resumed(out["fresh"], out["step"], out["next_step"], out["digest"], out["world"],
                               list(out["sources"]), list(out["setbacks"]), out["verified_bytes"])
        return out["next_step"]

    def _load(self, view) -> None:
        try:
            self._load_step(view)
        except Exception as e:
            self._load_failure = e
            raise

    def _load_step(self, view) -> None:
        state = view.state()
        skeleton = pickle.loads(state["values"][_SKELETON_KEY])  # the job's own verified state (spec/PYTHON.md 6.3)
        refs = _refs(skeleton, [])
        # Every tensor's dtype and size checked before a byte is applied (the bytes were verified before this call).
        for ref in refs:
            found = view.tensor(ref.name)
            if found is None:
                raise KeyError(f"step {view.step} has no tensor '{ref.name}'")
            dtype, shape = found
            if dtype != ref.dtype or int(np.prod(shape)) != int(np.prod(ref.shape, dtype=np.int64)):
                raise ValueError(f"step {view.step}: tensor '{ref.name}' is {dtype} {list(shape)}, the state dict says "
                                 f"{ref.dtype} {list(ref.shape)}")
        # Each tensor of a part (model, optimizer, scheduler) whose live tensors are exactly the step's is read straight
        # into the live tensor of its name where that is the same host tensor (no allocation, and load_state_dict then
        # copies nothing): in a restarted process the model's parameters, whose optimizer has no state yet. The rest
        # goes into new tensors. With the dtypes and sizes checked above and the optimizer's groups here, a step that
        # does not fit is refused before a byte of it reaches the live state, except for names the model lacks or
        # adds: load_state_dict (strict) reports those after copying the rest, as PyTorch does.
        live: List[Tuple[str, torch.Tensor]] = []
        parts_live = self._state_dicts()
        _check_optimizer_groups(skeleton, parts_live, view.step)
        _split(parts_live, "", live)
        targets = _in_place_targets(live, refs)
        loaded: Dict[str, torch.Tensor] = {}
        for ref in refs:
            t = targets.get(ref.name)
            raw = _tensors.torch_target(t, ref.dtype, ref.shape) if t is not None else None
            if raw is None:
                t, raw = _tensors.torch_empty(ref.dtype, ref.shape)
            if raw is not None:
                view.read_tensor(ref.name, raw)
            loaded[ref.name] = t
        parts = _fill(skeleton, loaded)
        self.model.load_state_dict(parts["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(parts["optim"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(parts["sched"])
        if self._load_data_state is not None and state["data_state"]:
            self._load_data_state(pickle.loads(state["data_state"]))
        _set_rng_state(state["rng"])

    # --- introspection and the end ------------------------------------------------------------------

    def placement(self) -> dict:
        return self._native.placement()

    def records(self) -> List[str]:
        """This rank's tier log records, described."""
        return self._native.records()

    @property
    def steps_replicated(self) -> int:
        return self._native.steps_replicated

    @property
    def steps_persisted(self) -> int:
        return self._native.steps_persisted

    @property
    def steps_skipped(self) -> int:
        """Captures not taken because the previous one was still in the background (when_busy "skip")."""
        return self._native.steps_skipped

    def close(self) -> None:
        """Finishes the work taken (as ``wait()``, without raising its failure) and releases the group."""
        if self._native is None:
            return
        atexit.unregister(self._close_at_exit)
        self._native.close()
        self._native = None
        dist.destroy_process_group(self.group)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False


def _closer(ref: "weakref.ref[TieredCheckpointer]") -> Callable[[], None]:
    """An atexit handler that closes the checkpointer if it still exists, without keeping it alive."""
    def close_at_exit() -> None:
        tiers = ref()
        if tiers is not None:
            tiers.close()
    return close_at_exit
