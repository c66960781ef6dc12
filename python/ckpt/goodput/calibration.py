"""The save costs ckpt-plan needs, read from a calibration run's events (spec/PYTHON.md 8).

A calibration launch saves after every step: the first saves are waited for (their stall, then the time
until durable: ``background``), the rest are not, so the steps after them show how much their background
work slows training (interference). For the tiers, captures are promoted every ``persist_every``-th step
and the two kinds are measured apart: a promotion writes the whole state to disk besides replicating it,
and charging its CPU to every capture (or to none) skews the plan's choice of how often to promote.
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
    capture's), ``persist_seconds``, ``persist_interference`` (a promotion's share beyond a capture's); else
    ``stall`` and ``background``."""
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
    costs = {"capture_stall": d_m, "replicate_seconds": replicate,
             "persist_stall": max(0.0, median(e["seconds"] for e in persisted) - d_m), "persist_seconds": persist}
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
