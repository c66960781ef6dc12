"""The save costs ckpt-plan needs, read from a calibration run's events (spec/PYTHON.md 8).

A calibration launch saves after every step: the first saves are waited for (their stall, then the time
until durable: ``background``), the rest are not, so the steps after them show how much their background
work slows training (interference). For the tiers, captures are promoted every ``persist_every``-th step
and the two kinds are measured apart: a promotion writes the whole state to disk besides replicating it,
and charging its CPU to every capture (or to none) skews the plan's choice of how often to promote.

A waited save's background has the cores to itself; in the run it competes with training, at a lower
priority, and can take several times as long (a promotion of 1 GiB on 2 cores: 3.0 s waited, more than
7.5 s in the run). The tiers' stalls and background times are therefore read from the overlapped captures,
as the run sees them: the stall of each, and from the ``phase`` events of rank 0's ``on_phase`` hook the
seconds from its stall's end until it was ``replicated`` and, promoted, ``persisted``. The waited figures
stay in the result (``*_alone``): they split the interference between the two kinds by their work.
"""

from __future__ import annotations

import statistics
from typing import Iterable, List, Optional


def median(values: Iterable[Optional[float]], default: float = 0.0) -> float:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else default


def save_costs(events: List[dict], ideal_step_s: float, tiered: bool, warmup: int = 1, persist_every: int = 2) -> dict:
    """Costs from one calibration launch's events. ``warmup``: waited saves left out because they pay for
    first use (the tiers: one per memory slot of the ring, each slot's pages allocated on its first capture;
    a relaunched process finds them allocated). Tiered: captures at steps that are multiples of
    ``persist_every`` are promoted.

    Keys: ``interference`` (seconds a step slows after a save it overlaps; tiered: a capture's share) and,
    tiered, ``capture_stall``, ``replicate_seconds``, ``persist_stall`` (a promoted capture's stall beyond a
    capture's), ``persist_seconds`` (each from the overlapped captures where they have one: ``*_from`` says
    ``overlapped`` or ``waited``), the same four when waited for (``*_alone``), ``persist_interference`` (a
    promotion's share beyond a capture's); else ``stall`` and ``background``."""
    saves = [e for e in events if e["ev"] == "save"]
    waited = [e for e in saves if "background" in e][warmup:]
    compute = {e["step"]: e["compute"] for e in events if e["ev"] == "step"}
    overlapped = [e["step"] for e in saves if "background" not in e]

    def slowdown(steps: Iterable[int]) -> float:
        after = [compute[s + 1] for s in steps if s + 1 in compute]
        return max(0.0, median(after, ideal_step_s) - ideal_step_s)

    if not tiered:
        return {"interference": slowdown(overlapped), "stall": median(e["seconds"] for e in waited),
                "background": median(e.get("background") for e in waited)}

    def promoted(step: int) -> bool:  # the tiers' own policy at memory_every 1
        return step % persist_every == 0

    captured = [e for e in waited if not promoted(e["step"])]
    persisted = [e for e in waited if promoted(e["step"])]
    d_m = median(e["seconds"] for e in captured)
    replicate = median(e.get("background") for e in captured)
    persist = median(e.get("background") for e in persisted)
    alone = {"capture_stall": d_m, "replicate_seconds": replicate,
             "persist_stall": max(0.0, median(e["seconds"] for e in persisted) - d_m), "persist_seconds": persist}
    costs = {**alone, **{k + "_alone": v for k, v in alone.items()}}
    costs.update(_as_the_run_sees_it(events, saves, promoted, alone))
    # The overlapped saves in cycles of `persist_every`, each from a promoted capture: the slowdown of the
    # steps after a cycle's saves, summed, is what its captures and its promotion cost training together,
    # wherever a promotion's work lands (one longer than a step also slows the step after the next capture,
    # which per step would be charged to that capture). The sum is split in proportion to how long each
    # save's background work ran when waited for: the two kinds contend for the same cores.
    after = {s: compute[s + 1] - ideal_step_s for s in overlapped if s + 1 in compute}
    cycles = [sum(after[p + j] for j in range(persist_every)) for p in overlapped
              if promoted(p) and all(p + j in after for j in range(persist_every))]
    if not cycles:  # too few overlapped saves for a whole cycle: each step charged to the save before it
        i_m = slowdown(s for s in overlapped if not promoted(s))
        return {"interference": i_m, **costs, "persist_interference": max(0.0, slowdown(s for s in overlapped if promoted(s)) - i_m)}
    total = max(0.0, median(cycles))
    work = (persist_every - 1) * replicate + persist
    i_m = total * replicate / work if work > 0 else total / persist_every
    return {"interference": i_m, **costs, "persist_interference": max(0.0, total - persist_every * i_m)}


def _as_the_run_sees_it(events: List[dict], saves: List[dict], promoted, alone: dict) -> dict:
    """The tiers' stalls and background seconds from the overlapped captures taken (not skipped): the stall, and
    the seconds from its end (the ``save`` event) to the first ``replicated`` / ``persisted`` phase of that step.
    A figure no overlapped capture gives keeps its waited value; ``*_from`` says which each is."""
    ends = {e["step"]: e for e in saves if "background" not in e and not e.get("skipped")}
    done: dict = {}
    for e in events:
        if e["ev"] == "phase" and e["phase"] in ("replicated", "persisted"):
            done.setdefault((e["phase"], e["step"]), e["t"])
    stalls = [e["seconds"] for s, e in ends.items() if not promoted(s)]
    promoted_stalls = [e["seconds"] for s, e in ends.items() if promoted(s)]
    found = {
        "capture_stall": median(stalls, None),
        "replicate_seconds": median((done[("replicated", s)] - e["t"] for s, e in ends.items() if ("replicated", s) in done), None),
        "persist_seconds": median((done[("persisted", s)] - e["t"] for s, e in ends.items()
                                   if promoted(s) and ("persisted", s) in done), None),
    }
    if stalls and promoted_stalls:
        found["persist_stall"] = max(0.0, median(promoted_stalls) - found["capture_stall"])
    out = {}
    for key, value in alone.items():
        have = found.get(key)
        out[key] = max(0.0, have) if have is not None else value
        out[key + "_from"] = "overlapped" if have is not None else "waited"
    return out
