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

    Keys: ``interference`` (seconds a step slows after a save it overlaps; tiered: after a capture that is
    not promoted) and, tiered, ``capture_stall``, ``replicate_seconds``, ``persist_stall`` (a promoted
    capture's stall beyond a capture's), ``persist_seconds``, ``persist_interference`` (a step's slowdown
    after a promoted capture beyond that after a capture); else ``stall`` and ``background``."""
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
    i_m = slowdown(s for s in overlapped if not promoted(s))
    i_p = slowdown(s for s in overlapped if promoted(s))
    return {"interference": i_m, "capture_stall": d_m, "replicate_seconds": median(e.get("background") for e in captured),
            "persist_stall": max(0.0, median(e["seconds"] for e in persisted) - d_m),
            "persist_seconds": median(e.get("background") for e in persisted),
            "persist_interference": max(0.0, i_p - i_m)}
