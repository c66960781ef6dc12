"""One rank of the goodput benchmark's training job, and the contenders' saves and loads.

The job is data parallel: every rank holds the whole model (an MLP of ``layers`` square blocks of
``hidden`` features with AdamW and a cosine learning-rate schedule) and trains on a batch that is a
function of (seed, step, rank) alone, so the data order needs no state. Gradients are reduced by one
``all_reduce`` per parameter in the model's order: DDP rebuilds its buckets after the first iteration
of every launch, so its reduction order (and the last bits of a resumed run) would depend on when the
job was restarted, and bit-identity would test DDP instead of the checkpoint.

Rank 0 writes one JSON line per event to the run's event log with ``os.write`` on an ``O_APPEND``
descriptor (a SIGKILL never leaves half a line): ``ready`` (process group and model built: the end of
the restart), ``loaded`` (the resume: what from, how long; the tiers: also what memory and storage held
just before it, ``tier_evidence``), ``step`` (one per training step, as soon as it is trained: its compute
seconds), ``saving`` (a save begins), ``save`` (the seconds the save after it blocked; calibration: and the
seconds until it was durable), ``phase`` (the tiers' background: a capture ``replicated``, a promotion
``persisted``, and the phases before them, from the ``on_phase`` hook), ``trained`` and ``done`` (the final state's digest; with ``--storage-gbps``,
what rank 0 moved across its node's link in this launch). The supervisor
(``supervisor.py``) writes ``launch`` and ``failure`` to the same log. Times are ``time.monotonic()``,
one clock for every process of the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import List, Optional

import torch
import torch.distributed as dist

from ..bench import fsync_path
from . import storage

# The contenders, in the order they are run and shown; "ideal" neither saves nor fails.
CONTENDERS = ("ideal", "torch_save", "dcp", "dcp_async", "ckpt_store", "ckpt_tiered", "ckpt_tiered_parity")
LABELS = {
    "ideal": "ideal (no checkpoints, no failures)",
    "torch_save": "torch.save (sync, rank 0)",
    "dcp": "DCP save (FileSystemWriter)",
    "dcp_async": "DCP async_save (FileSystemWriter)",
    "ckpt_store": "ckpt store (DCP async_save on ckpt's StorageWriter)",
    "ckpt_tiered": "ckpt tiered (memory + peer replica + store)",
    "ckpt_tiered_parity": "ckpt tiered (memory + parity group + store)",
}
# The tiered contenders: one replica on the next node, or one parity group of every node surviving one loss.
TIERED = {"ckpt_tiered", "ckpt_tiered_parity"}
# Contenders whose every load verifies every byte against its digest.
VERIFIED = {"ckpt_store", "ckpt_tiered", "ckpt_tiered_parity"}
KEEP = 2  # checkpoints each contender keeps


@dataclass
class JobConfig:
    """Everything a rank needs; the same object on every rank of every launch of one contender."""

    contender: str
    world: int
    nodes: int
    hidden: int
    layers: int
    batch: int
    steps: int
    seed: int
    workdir: str            # this contender's persistent storage (disk)
    memory_base: str        # node memory roots: <memory_base>/node-<n> (tmpfs)
    events: str             # the event log
    interval: int = 1       # steps between saves; tiered: between memory captures
    persist_every: int = 0  # tiered: steps between promotions (a multiple of interval)
    calibrate: int = 0      # > 0: save after each of 2 x `calibrate` steps, waiting for the first half's saves, then stop
    resume_only: bool = False  # load the latest checkpoint, log it, stop
    init_file: str = ""
    device: str = "cpu"
    timeout_s: float = 120.0
    # "cpu": a step is real training on the host's cores. "accelerator": a step is a fixed device time during
    # which the host's cores are free; on a CPU-only machine emulated by waiting `device_step_s` around a
    # cheap deterministic update (so a resumed run stays bit-identical); on a GPU, real device work.
    profile: str = "cpu"
    device_step_s: float = 2.0
    # > 0: every node reaches `workdir` through a link of this many decimal GB/s its ranks share (storage.py).
    storage_gbps: float = 0.0

    def node_of(self, rank: int) -> int:
        return rank * self.nodes // self.world

    def memory_root(self, node: int) -> str:
        return os.path.join(self.memory_base, f"node-{node}")


def state_bytes(hidden: int, layers: int) -> int:
    """Bytes of the checkpointed state: parameters and AdamW's two moments, float32."""
    return 3 * 4 * layers * (hidden * hidden + hidden)


def build_model(hidden: int, layers: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    blocks: List[torch.nn.Module] = []
    for i in range(layers):
        blocks.append(torch.nn.Linear(hidden, hidden))
        if i + 1 < layers:
            blocks.append(torch.nn.GELU())
    return torch.nn.Sequential(*blocks)


def batch_for(cfg: JobConfig, step: int, rank: int, device) -> tuple:
    """The batch of (step, rank): the data order is a function of the seed alone."""
    g = torch.Generator().manual_seed((cfg.seed * 1_000_003 + step) * 1009 + rank)
    x = torch.randn(cfg.batch, cfg.hidden, generator=g)
    y = torch.tanh(torch.randn(cfg.batch, cfg.hidden, generator=g))
    return x.to(device), y.to(device)


def prime_optimizer(model, optimizer) -> None:
    """The accelerator profile's optimizer state as AdamW's first step makes it (a step count and two zero
    moments per parameter), so a checkpoint holds what training's would; the same on every rank and launch,
    before any resume. Made directly, not by a step on zero gradients: on a GPU that step is device work, and
    here it took the host's cores 0.6-0.7 s at every restart of every contender (docs/goodput.md)."""
    for p in model.parameters():
        optimizer.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                              "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}


def emulated_step(cfg: JobConfig, step: int, model, scheduler) -> None:
    """A step of the accelerator profile on a host without one: the device's time is waited out while the
    host's cores stay free; the state still changes every step (a few elements of each tensor, a function
    of the seed and the step alone), so a resumed run must load the right state to end bit-identical."""
    end = time.monotonic() + cfg.device_step_s
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            flat = p.view(-1)
            n = min(64, flat.numel())
            flat[:n].mul_(0.999).add_(((cfg.seed * 31 + step * 7 + i) % 97) * 1e-4)
    scheduler.step()
    time.sleep(max(0.0, end - time.monotonic()))


def train_step(cfg: JobConfig, step: int, rank: int, model, optimizer, scheduler, device) -> None:
    if cfg.profile == "accelerator" and cfg.device == "cpu":
        return emulated_step(cfg, step, model, scheduler)
    x, y = batch_for(cfg, step, rank, device)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    for p in model.parameters():  # one all_reduce per parameter, in a fixed order (module docstring)
        dist.all_reduce(p.grad)
        p.grad.div_(cfg.world)
    optimizer.step()
    scheduler.step()


def state_digest(model, optimizer) -> str:
    """XXH3-64 over every parameter and optimizer state tensor, in order: equal digests are equal bits."""
    from .. import xxh3_64

    parts = []
    for p in model.parameters():
        parts.append(f"{xxh3_64(p.detach().cpu().contiguous().view(torch.uint8).numpy()):016x}")
        for k, v in sorted(optimizer.state.get(p, {}).items()):
            t = v if isinstance(v, torch.Tensor) else torch.tensor(v)
            parts.append(f"{xxh3_64(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()):016x}")
    lr = ",".join(repr(g["lr"]) for g in optimizer.param_groups)
    return f"{xxh3_64(('|'.join(parts) + '|' + lr).encode()):016x}"


class EventLog:
    def __init__(self, path: str, enabled: bool):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if enabled else -1

    def __call__(self, ev: str, **fields) -> None:
        if self.fd >= 0:
            os.write(self.fd, (json.dumps({"ev": ev, "t": time.monotonic(), **fields}) + "\n").encode())


def append_event(path: str, ev: str, **fields) -> None:
    """The supervisor's events, into the same log (a descriptor per event: the supervisor lives long)."""
    log = EventLog(path, True)
    try:
        log(ev, **fields)
    finally:
        os.close(log.fd)


def _numbered(directory: str, prefix: str, suffix: str = "") -> List[int]:
    out = []
    for name in os.listdir(directory) if os.path.isdir(directory) else []:
        if name.startswith(prefix) and name.endswith(suffix):
            core = name[len(prefix):len(name) - len(suffix)]
            if core.isdigit():
                out.append(int(core))
    return sorted(out)


def tier_evidence(memory_roots: List[str], persistent: str) -> dict:
    """What the tiers can resume from, read from outside the job with the library's inspection
    (``ckpt.inspect``, the document of ``ckpt-inspect --json``): ``memory_steps``, every step that the
    memory roots together hold whole, and ``storage_steps``, every step committed in the persistent store,
    each ascending.

    It follows the resume's rule (spec/TIERS.md 7.1). A step is a claim: a CAPTURED record of a memory
    root's tier logs, or a committed persistent step, with the digest of each of its shards. Memory holds
    it whole when every shard has a copy in some memory root (a rank's ``own`` store or a replica in a
    ``held-<s>`` store, on either node: a peer sends what a rank lacks) that opens, is not set aside and
    has the claimed shard digest; a step some log records as LOAD_FAILED is never one. A memory root that
    a failure wiped holds nothing. A resume then loads the newest step either tier holds, and from memory
    alone when memory holds it whole (nearest copy first)."""
    from .. import inspect, root_digest

    claims = {}     # (step, shard digests) -> failed to load
    copies = set()  # (step, shard, shard digest) of every usable memory copy
    for root in memory_roots:
        if not os.path.isdir(root) or not any(n.startswith("rank-") for n in os.listdir(root)):
            continue  # wiped (or nothing captured yet)
        doc = inspect(root)
        if doc.kind != "memory_root":
            raise RuntimeError(f"{root}: ckpt-inspect calls it a {doc.kind}, not a memory root")
        for st in doc.json["steps"]:
            digests = [sh.get("digest") for sh in sorted(st["shards"], key=lambda sh: sh["shard"])]
            if st.get("captured") and all(digests) and len(digests) == st["world"]:
                key = (st["step"], tuple(digests))
                claims[key] = claims.get(key, False) or bool(st.get("load_failed"))
        for c in doc.json["copies"]:
            if c.get("error") is None and not c.get("set_aside") and c.get("digest"):
                copies.add((c["step"], c["shard"], c["digest"]))
    storage = []
    if os.path.exists(os.path.join(persistent, "JOURNAL")):
        for st in inspect(persistent).json["steps"]:
            if st.get("status") != "ok":
                continue
            storage.append(st["step"])
            files = sorted(st["files"], key=lambda f: f["rank"])
            key = (st["step"], tuple(root_digest(os.path.join(persistent, st["dir"], f["name"])) for f in files))
            claims.setdefault(key, False)
    memory = {step for (step, digests), failed in claims.items() if not failed and
              all((step, s, d) in copies for s, d in enumerate(digests))}
    return {"memory_steps": sorted(memory), "storage_steps": sorted(storage)}


# --- The contenders -------------------------------------------------------------------------------------
# Each: resume() -> (next step, what it loaded from); save(step) after training step `step` (blocking as
# the system blocks); drain() waits for saves in flight; close().


class Contender:
    def __init__(self, cfg: JobConfig, rank: int, model, optimizer, scheduler):
        self.cfg, self.rank, self.model, self.optimizer, self.scheduler = cfg, rank, model, optimizer, scheduler
        self.evidence: dict = {}  # fields for the `loaded` event beside what resume() returns

    def due(self, step: int) -> bool:
        return (step + 1) % self.cfg.interval == 0

    def resume(self):
        return 0, None

    def save(self, step: int) -> bool:
        """Saves after step `step`; True when the system skipped it (the tiers' when_busy "skip")."""
        return False

    def drain(self) -> Optional[float]:
        """Waits for saves in flight; returns how long that took (None: nothing runs behind)."""
        return None

    def close(self) -> None:
        pass


class Ideal(Contender):
    def due(self, step: int) -> bool:
        return False


class TorchSave(Contender):
    """What most jobs do: rank 0 writes the whole state with torch.save (temp file, fsync, rename, fsync
    of the directory), the others wait at a barrier; every rank loads the newest file."""

    def __init__(self, *a):
        super().__init__(*a)
        self.dir = os.path.join(self.cfg.workdir, "torch_save")
        os.makedirs(self.dir, exist_ok=True)

    def resume(self):
        steps = _numbered(self.dir, "step-", ".pt")
        if not steps:
            return 0, None
        path = os.path.join(self.dir, f"step-{steps[-1]}.pt")
        size = os.path.getsize(path)
        storage.read(path, 0, size, size)  # the whole file crosses the node's link (mapped: read in full below)
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optim"])
        self.scheduler.load_state_dict(state["sched"])
        return int(state["next_step"]), f"file step-{steps[-1]}.pt"

    def save(self, step: int) -> None:
        if self.rank == 0:
            final = os.path.join(self.dir, f"step-{step}.pt")
            tmp = final + ".tmp"
            with open(tmp, "wb") as f:
                torch.save({"model": self.model.state_dict(), "optim": self.optimizer.state_dict(),
                            "sched": self.scheduler.state_dict(), "next_step": step + 1}, storage.PacedStream(f, tmp))
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, final)
            fsync_path(self.dir)
            for old in _numbered(self.dir, "step-", ".pt")[:-KEEP]:
                os.unlink(os.path.join(self.dir, f"step-{old}.pt"))
        dist.barrier()


class Dcp(Contender):
    """PyTorch DCP with its FileSystemWriter (files fsynced, ``.metadata`` written last by rename): one
    directory per step; the newest with ``.metadata`` is complete. ``use_async``: ``dcp.async_save`` on a
    gloo group of its own, the previous save awaited before the next. ``ckpt``: the same calls on ckpt's
    StorageWriter/StorageReader (one store; every byte loaded verified)."""

    def __init__(self, *a, use_async: bool = False, ckpt_backend: bool = False):
        super().__init__(*a)
        import torch.distributed.checkpoint as dcp

        self.dcp = dcp
        self.use_async, self.ckpt_backend = use_async, ckpt_backend
        self.dir = os.path.join(self.cfg.workdir, "ckpt_store" if ckpt_backend else "dcp")
        if self.rank == 0:
            os.makedirs(self.dir, exist_ok=True)
        self.group = dist.new_group(backend="gloo") if use_async else None
        self.pending = None

    def _state(self):
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, "sched": self.scheduler.state_dict(), "next_step": 0}

    def _latest(self) -> Optional[int]:
        if self.ckpt_backend:
            from ..store import Store

            if not os.path.exists(os.path.join(self.dir, "JOURNAL")):
                return None
            with Store(self.dir, read_only=True) as s:
                return s.latest()
        done = [s for s in _numbered(self.dir, "step-") if os.path.exists(os.path.join(self.dir, f"step-{s}", ".metadata"))]
        return done[-1] if done else None

    def resume(self):
        dist.barrier()  # rank 0 made the directory
        step = self._latest()
        if step is None:
            return 0, None
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self._state()
        if self.ckpt_backend:
            from ..torch.dcp import StorageReader

            self.dcp.load(state, storage_reader=StorageReader(self.dir, step))
        else:
            reader = self.dcp.FileSystemReader(os.path.join(self.dir, f"step-{step}"))
            reader.fs = storage.dcp_file_system()  # its streams cross the node's link
            self.dcp.load(state, storage_reader=reader)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.scheduler.load_state_dict(state["sched"])
        return int(state["next_step"]), f"step {step}"

    def _retain(self) -> None:
        if self.rank != 0 or self.ckpt_backend:  # the ckpt store retires by its own policy (keep_last)
            return
        done = [s for s in _numbered(self.dir, "step-") if os.path.exists(os.path.join(self.dir, f"step-{s}", ".metadata"))]
        if not done:
            return
        for s in _numbered(self.dir, "step-"):
            if s < done[-1] and s not in done[-KEEP:]:
                shutil.rmtree(os.path.join(self.dir, f"step-{s}"), ignore_errors=True)

    def save(self, step: int) -> None:
        self.drain()
        state = self._state()
        state["next_step"] = step + 1
        if self.ckpt_backend:
            from ..torch.dcp import StorageWriter

            target = {"storage_writer": StorageWriter(self.dir, step, process_group=self.group, keep_last=KEEP)}
        else:
            writer = self.dcp.FileSystemWriter(os.path.join(self.dir, f"step-{step}"))  # what checkpoint_id= makes
            writer.fs = storage.dcp_file_system()  # its streams cross the node's link
            target = {"storage_writer": writer}
        if self.use_async:
            self.pending = self.dcp.async_save(state, process_group=self.group, **target)
        else:
            self.dcp.save(state, **target)
            self._retain()

    def drain(self) -> Optional[float]:
        if self.pending is None:
            return None
        t = time.monotonic()
        self.pending.result()
        self.pending = None
        self._retain()
        return time.monotonic() - t

    def close(self) -> None:
        self.drain()


class Tiered(Contender):
    """ckpt's TieredCheckpointer: memory captures every ``interval`` steps (replicated to the next node),
    promoted to the persistent store every ``persist_every``; resume agrees on the newest step every shard
    of which verifies, from the nearest copy."""

    def __init__(self, *a, log: Optional[EventLog] = None):
        super().__init__(*a)
        from ..torch.tiers import TieredCheckpointer

        # Rank 0's log gets the background's phases (`phase` events): when each capture was replicated and each
        # promotion persisted, as the run saw it (calibration.save_costs; a few calls per capture).
        def on_phase(phase: str, step: int) -> None:
            log("phase", phase=phase, step=step)

        cfg = self.cfg
        self.tiers = TieredCheckpointer(
            self.model, self.optimizer, self.scheduler, memory_root=cfg.memory_root(cfg.node_of(self.rank)),
            persistent=os.path.join(cfg.workdir, "tiered"), memory_every=cfg.interval, persist_every=cfg.persist_every,
            replicas=1 if cfg.nodes > 1 else 0, memory_keep=KEEP, persistent_keep=KEEP,
            topology=[f"n{cfg.node_of(r)}" for r in range(cfg.world)],
            # Parity instead of the replica: the nodes form one group that survives one lost node (spec/TIERS.md 12).
            parity=(cfg.nodes, 1) if cfg.contender == "ckpt_tiered_parity" and cfg.nodes > 1 else None,
            on_phase=on_phase if log is not None and log.fd >= 0 else None)

    def due(self, step: int) -> bool:
        return self.tiers.action(step) != "none"  # the tiers' own policy: multiples of memory_every

    def resume(self):
        # What memory and storage hold before the resume decides, so the report can judge its choice. Every
        # rank has opened its stores (the barrier), and none changes what a tier has committed before the
        # resume's plan, which rank 0 makes after this: the inspection sees what the resume will. The
        # supervisor reaped the previous launch and wiped what the failure wiped before this launch began.
        # (A few milliseconds, in the measured load time.)
        dist.barrier()
        if self.rank == 0:
            t = time.monotonic()
            cfg = self.cfg
            try:
                self.evidence = tier_evidence([cfg.memory_root(n) for n in range(cfg.nodes)], os.path.join(cfg.workdir, "tiered"))
            except Exception as e:  # the benchmark goes on; the report shows why the evidence is missing
                self.evidence = {"evidence_error": f"{type(e).__name__}: {e}"}
            self.evidence["evidence_s"] = time.monotonic() - t
        start = self.tiers.resume()
        r = self.tiers.resumed
        if r is None or r.fresh:
            return start, None
        print(f"resumed step {r.step}: sources {r.sources}; setbacks {r.setbacks}", flush=True)  # the rank's log
        # "shard 2 from replica in memory (...)": the kinds of copy this rank loaded from.
        kinds = sorted({s.split(" from ", 1)[1].split(" (")[0] for s in r.sources if " from " in s})
        return start, f"step {r.step} from {', '.join(kinds) or '?'}"

    def save(self, step: int) -> bool:
        return self.tiers.step(step) == "skipped"

    def drain(self) -> Optional[float]:
        t = time.monotonic()
        self.tiers.wait()
        return time.monotonic() - t

    def close(self) -> None:
        self.tiers.close()


def make_contender(cfg: JobConfig, rank: int, model, optimizer, scheduler, log: Optional[EventLog] = None) -> Contender:
    args = (cfg, rank, model, optimizer, scheduler)
    if cfg.contender == "ideal":
        return Ideal(*args)
    if cfg.contender == "torch_save":
        return TorchSave(*args)
    if cfg.contender == "dcp":
        return Dcp(*args)
    if cfg.contender == "dcp_async":
        return Dcp(*args, use_async=True)
    if cfg.contender == "ckpt_store":
        return Dcp(*args, use_async=True, ckpt_backend=True)
    if cfg.contender in TIERED:
        return Tiered(*args, log=log)
    raise ValueError(f"unknown contender {cfg.contender!r}; one of {', '.join(CONTENDERS)}")


# --- One rank -----------------------------------------------------------------------------------------------


def run_rank(cfg: JobConfig, rank: int, model: torch.nn.Module) -> None:
    """One rank of one launch. `model` is the initial model, inherited from the supervisor by fork."""
    entered = time.monotonic()
    log = EventLog(cfg.events, rank == 0)
    device = torch.device("cpu")
    backend = "gloo"
    if cfg.device == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl"
        model = model.to(device)
    dist.init_process_group(backend, init_method=f"file://{cfg.init_file}", rank=rank, world_size=cfg.world,
                            timeout=timedelta(seconds=cfg.timeout_s))
    grouped = time.monotonic()
    storage.pace(cfg.workdir, cfg.memory_base, cfg.node_of(rank), cfg.storage_gbps)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    if cfg.profile == "accelerator" and cfg.device == "cpu":
        prime_optimizer(model, optimizer)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, cfg.steps))
    built = time.monotonic()
    contender = make_contender(cfg, rank, model, optimizer, scheduler, log)
    # Where the restart went (rank 0): forked at `entered`, the process group, the model and optimizer, the contender.
    log("ready", entered=entered, group_s=grouped - entered, model_s=built - grouped, contender_s=time.monotonic() - built)
    t = time.monotonic()
    start, source = contender.resume()
    log("loaded", next_step=start, source=source, seconds=time.monotonic() - t, **contender.evidence)
    if cfg.resume_only:
        contender.close()
        dist.destroy_process_group()
        return
    last = cfg.steps if cfg.calibrate <= 0 else min(cfg.steps, start + 2 * cfg.calibrate)
    for step in range(start, last):
        t0 = time.monotonic()
        train_step(cfg, step, rank, model, optimizer, scheduler, device)
        t1 = time.monotonic()
        log("step", step=step, compute=t1 - t0)  # before the save: a kill during it still counts the step as done
        if cfg.calibrate > 0 or contender.due(step):
            log("saving", step=step)  # a failure before `save` cut off the save, not training (report.lost_time)
            skipped = contender.save(step)
            t2 = time.monotonic()
            # Calibration: the first `calibrate` saves are each waited for (stall, then time to durable); the
            # next `calibrate` are not, so their steps show what the saves' background work costs the compute.
            # (A sync save has nothing behind it: 0.)
            background = (contender.drain() or 0.0) if 0 < cfg.calibrate and step - start < cfg.calibrate else None
            log("save", step=step, seconds=t2 - t1, **({"background": background} if background is not None else {}),
                **({"skipped": True} if skipped else {}))
    log("trained", step=last)
    digest = state_digest(model, optimizer) if last == cfg.steps else None
    digests = [None] * cfg.world
    dist.all_gather_object(digests, digest)
    contender.close()
    # With --storage-gbps: rank 0's bytes across its node's storage link in this launch, its background work
    # drained by close(), and the link's seconds for them.
    log("done", digest=digest, ranks_agree=len(set(digests)) == 1, **({"storage": storage.stats()} if cfg.storage_gbps > 0 else {}))
    dist.destroy_process_group()
