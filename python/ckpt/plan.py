"""ckpt.plan: how often to checkpoint, from the C++ planner (spec/PLAN.md, spec/PYTHON.md 7).

Every number comes from ``include/ckpt/store/planner.hpp`` through the binding; nothing is computed here.
Times are seconds, wastes are fractions of wall time. Invalid input raises ``InvalidArgumentError``;
a tiered model whose costs leave no policy wasting less than all of the time, or a simulation that
would run for hours, raises ``UnsupportedError``.
"""

from __future__ import annotations

from typing import Optional

from . import _ckpt


def single(stall: float, background: float, mtbf: float, restart: float, interval: Optional[float] = None) -> dict:
    """One checkpoint policy (spec/PLAN.md 3): a save that blocks training ``stall`` seconds and is
    durable ``background`` seconds later, failures every ``mtbf`` seconds on average, ``restart``
    seconds to come back. Keys: ``young_seconds``, ``daly_seconds``, ``optimum_seconds`` (the model's
    own minimum, 3.4), ``interval_seconds`` (``interval``, or the optimum), ``waste`` and
    ``overhead_ratio`` (wall over useful time) at ``interval_seconds``, exact for the model of 3.2."""
    return dict(_ckpt.plan_single(stall, background, mtbf, restart, interval))


def job_seconds(stall: float, background: float, mtbf: float, restart: float, interval: float, intervals: int) -> float:
    """Expected wall seconds of a job of ``intervals`` checkpoint intervals of ``interval`` seconds of
    compute each, from nothing in flight to its last checkpoint durable (spec/PLAN.md 3.3)."""
    return _ckpt.plan_job_seconds(stall, background, mtbf, restart, interval, intervals)


def tiered(capture_stall: float, replicate_seconds: float, persist_stall: float, persist_seconds: float, mtbf: float,
           memory_restart: float, persistent_restart: float, crash_share: float, node_loss_share: float,
           power_loss_share: float, replicated: bool = True, memory_interval: Optional[float] = None,
           persist_every: Optional[int] = None, simulate: int = 0, seed: int = 1, memory_slots: int = 0,
           when_busy: str = "wait") -> dict:
    """Two tiers (spec/PLAN.md 10): a capture into memory every ``memory_interval`` seconds of compute,
    every ``persist_every``-th promoted to persistent storage. Crashes, and node losses when
    ``replicated``, restart from memory; power losses, and node losses otherwise, from persistent storage.
    ``memory_interval`` and ``persist_every`` default to the optimum (given the other, if one is given).

    Keys: ``memory_interval_seconds``, ``persist_every``, ``waste`` (first-order closed form, 10.3),
    ``optimum_memory_interval_seconds``, ``optimum_persist_every``, ``waste_at_optimum``, and, with
    ``simulate`` histories of the seeded Monte Carlo (10.5), ``simulated_waste``, ``standard_error`` and
    ``simulated_skips_per_capture`` (captures not taken per capture of the job; else None). The simulation also
    follows the checkpointer's own rules (10.5.1), which the closed form leaves out: ``memory_slots``, its
    ring (``max(memory_keep, 2)``; 0, unbounded), and ``when_busy``, "wait" or "skip" for a capture due
    while the previous one replicates or a promotion still reads the slot it would overwrite."""
    return dict(_ckpt.plan_tiered(capture_stall, replicate_seconds, persist_stall, persist_seconds, mtbf, memory_restart,
                                  persistent_restart, crash_share, node_loss_share, power_loss_share, replicated,
                                  memory_interval, persist_every, simulate, seed, memory_slots, when_busy))


__all__ = ["single", "job_seconds", "tiered"]
