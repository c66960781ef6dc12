"""The supervisor: launches the job's ranks as an elastic agent would, injects failures on a seeded
schedule, restarts the job after each, and reads back what happened from the event log.

Ranks are forked from the supervisor once it has imported torch and built the initial model, so a
restart costs what it costs a warm agent (process group, optimizer, the contender's resume), the same
for every contender. Failure kinds (spec of the benchmark: docs/goodput.md):

- ``crash``: one rank is SIGKILLed; the job is torn down (every other rank SIGKILLed, as torchrun does)
  and restarted; every node's memory survives.
- ``node``: every rank of one node is SIGKILLed and that node's memory tier is wiped; the job restarts.
- ``power``: every rank is SIGKILLed and every memory tier wiped; only persistent storage survives.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence

from . import job as _job
from . import storage

KINDS = ("crash", "node", "power")


@dataclass(frozen=True)
class Failure:
    at: float      # seconds after the contender's first launch
    kind: str      # one of KINDS
    victim: int    # the rank (crash) or node (node) that fails; -1 for power


def failure_schedule(seed: int, mtbf: float, mix: Dict[str, float], world: int, nodes: int, horizon: float) -> List[Failure]:
    """Exponential inter-arrival times of mean `mtbf`, each failure's kind drawn from `mix`: the same list
    for every contender (one generator, drawn in a fixed order)."""
    rng = random.Random(seed)
    kinds = [k for k in KINDS if mix.get(k, 0) > 0]
    weights = [mix[k] for k in kinds]
    out, t = [], 0.0
    while True:
        t += rng.expovariate(1.0 / mtbf)
        kind = rng.choices(kinds, weights)[0]
        victim = rng.randrange(world) if kind == "crash" else rng.randrange(nodes) if kind == "node" else -1
        if t > horizon:
            return out
        out.append(Failure(t, kind, victim))


class JobError(RuntimeError):
    pass


def read_events(path: str) -> List[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _launch(cfg: _job.JobConfig, model, attempt: int, logs: str) -> Dict[int, int]:
    """Forks the ranks of one launch; returns pid -> rank."""
    init = os.path.join(cfg.workdir, f".init-{attempt}-{time.monotonic_ns()}")
    cfg = replace(cfg, init_file=init)
    _job.append_event(cfg.events, "launch", attempt=attempt)
    storage.forget_reads(cfg.memory_base)  # a restarted job's page caches are cold
    children = {}
    for rank in range(cfg.world):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(os.path.join(logs, f"attempt-{attempt}-rank-{rank}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _job.run_rank(cfg, rank, model)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = rank
    return children


def _kill(children: Dict[int, int], ranks=None) -> None:
    for pid, rank in list(children.items()):
        if ranks is None or rank in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _status(raw: int) -> int:
    """A wait status as an exit code, or minus the signal that killed the process."""
    return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def _reap(children: Dict[int, int]) -> Dict[int, int]:
    """Waits for every child; returns rank -> exit status."""
    status = {}
    for pid, rank in list(children.items()):
        _, raw = os.waitpid(pid, 0)
        status[rank] = _status(raw)
        del children[pid]
    return status


def _log_tail(logs: str, attempt: int, world: int) -> str:
    parts = []
    for r in range(world):
        p = os.path.join(logs, f"attempt-{attempt}-rank-{r}.txt")
        if os.path.exists(p):
            parts.append(f"--- attempt {attempt} rank {r}\n" + open(p, errors="replace").read()[-3000:])
    return "\n".join(parts)


def wipe_memory(cfg: _job.JobConfig, node: Optional[int] = None) -> None:
    nodes = range(cfg.nodes) if node is None else [node]
    for n in nodes:
        shutil.rmtree(cfg.memory_root(n), ignore_errors=True)


def run_job(cfg: _job.JobConfig, model, logs: str, limit_s: float, failures: Sequence[Failure] = (),
            first_attempt: int = 0) -> int:
    """Runs the job to its end (its last step, or a calibration's or a resume-only launch's), injecting
    `failures` (times from the first launch) and restarting after each; returns the number injected.
    A rank that fails on its own, or a run past `limit_s`, is an error."""
    t0 = time.monotonic()
    attempt, pending, injected = first_attempt, list(failures), 0
    while True:
        children = _launch(cfg, model, attempt, logs)
        status: Dict[int, int] = {}
        failed = False
        while children:
            now = time.monotonic()
            if now - t0 > limit_s:
                _kill(children)
                _reap(children)
                raise JobError(f"{cfg.contender}: ran past {limit_s:.0f} s\n" + _log_tail(logs, attempt, cfg.world))
            if pending and now >= t0 + pending[0].at:
                f = pending.pop(0)
                if any(e["ev"] == "trained" and e.get("step") == cfg.steps for e in read_events(cfg.events)):
                    continue  # the job's work is done: a failure now changes nothing measured
                victims = [f.victim] if f.kind == "crash" else \
                    [r for r in range(cfg.world) if cfg.node_of(r) == f.victim] if f.kind == "node" else list(range(cfg.world))
                _kill(children, victims)
                _kill(children)  # the job is torn down
                _reap(children)
                if f.kind == "node":
                    wipe_memory(cfg, f.victim)
                elif f.kind == "power":
                    wipe_memory(cfg)
                _job.append_event(cfg.events, "failure", kind=f.kind, victim=f.victim, scheduled=f.at,
                                  victims=victims)
                injected += 1
                failed = True
                break
            pid, raw = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                time.sleep(0.002)
                continue
            rank = children.pop(pid)
            status[rank] = _status(raw)
            if status[rank] != 0:
                _kill(children)
                status.update(_reap(children))
                raise JobError(f"{cfg.contender}: rank {rank} failed on its own in launch {attempt}: {status}\n" +
                               _log_tail(logs, attempt, cfg.world))
        attempt += 1
        if not failed:
            return injected
