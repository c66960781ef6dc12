"""ckpt.plan: the C++ planner through the binding (spec/PYTHON.md 7, spec/PLAN.md 3, 8 and 10)."""

import math

import pytest

import ckpt
from ckpt import plan

TIER = dict(capture_stall=1.0, replicate_seconds=10.0, persist_stall=20.0, persist_seconds=120.0, mtbf=10800.0,
            memory_restart=60.0, persistent_restart=600.0, crash_share=0.6, node_loss_share=0.3, power_loss_share=0.1)


def test_single_matches_the_worked_example():
    # spec/PLAN.md 8: stall 60 s, MTBF 3 h, restart 300 s, sync.
    at_daly = plan.single(60, 0, 10800, 300, interval=1098.77132)
    assert at_daly["young_seconds"] == pytest.approx(1138.41996, rel=1e-8)
    assert at_daly["daly_seconds"] == pytest.approx(1098.77132, rel=1e-8)
    assert at_daly["interval_seconds"] == 1098.77132
    assert at_daly["overhead_ratio"] == pytest.approx(1.14461906, rel=1e-7)
    assert at_daly["waste"] == pytest.approx(0.12634689, rel=1e-6)
    assert at_daly["waste"] == pytest.approx(1 - 1 / at_daly["overhead_ratio"], rel=1e-12)


def test_single_without_an_interval_is_at_the_model_optimum():
    best = plan.single(60, 0, 10800, 300)
    assert set(best) == {"young_seconds", "daly_seconds", "optimum_seconds", "interval_seconds", "waste", "overhead_ratio"}
    assert best["interval_seconds"] == best["optimum_seconds"]
    for factor in (0.9, 0.99, 1.01, 1.1):
        assert best["waste"] <= plan.single(60, 0, 10800, 300, interval=best["optimum_seconds"] * factor)["waste"]
    # A background write longer than Daly's interval: the optimum is the write (spec/PLAN.md 3.4).
    waits = plan.single(1, 300, 2000, 100)
    assert waits["optimum_seconds"] == pytest.approx(300, rel=1e-6)


def test_job_seconds_is_the_expected_wall_time_of_a_finite_job():
    # Sync (no in-flight write): n intervals of A(tau) = M e^{R/M} (e^{(tau + d)/M} - 1) each (spec/PLAN.md 3.3).
    a = 10800 * math.exp(300 / 10800) * math.expm1(1060 / 10800)
    assert plan.job_seconds(60, 0, 10800, 300, 1000, 50) == pytest.approx(50 * a, rel=1e-12)
    assert plan.job_seconds(60, 0, 10800, 300, 1000, 100) == pytest.approx(2 * plan.job_seconds(60, 0, 10800, 300, 1000, 50))
    # An async write adds the first interval's in-flight time, nothing per interval beyond e^{w/M}.
    assert plan.job_seconds(1, 30, 10800, 300, 1000, 50) > 50 * 1000


def test_tiered_at_the_optimum_and_at_a_given_policy():
    best = plan.tiered(**TIER)
    assert set(best) == {"memory_interval_seconds", "persist_every", "waste", "optimum_memory_interval_seconds",
                         "optimum_persist_every", "waste_at_optimum", "simulated_waste", "standard_error",
                         "simulated_skips_per_capture"}
    assert best["memory_interval_seconds"] == best["optimum_memory_interval_seconds"]
    assert best["persist_every"] == best["optimum_persist_every"] > 1
    assert best["waste"] == best["waste_at_optimum"]
    assert best["simulated_waste"] is None and best["standard_error"] is None
    given = plan.tiered(**TIER, memory_interval=300, persist_every=5)
    assert given["memory_interval_seconds"] == 300 and given["persist_every"] == 5
    assert given["waste"] > best["waste"]
    assert given["waste_at_optimum"] == best["waste_at_optimum"]
    # spec/PLAN.md 10.3 at tau = 300, k = 5: x = 305, E[cost] = 0.9 (60 + x/2 + 10) + 0.1 (600 + 5x/2 + 120).
    x = 305.0
    cost = 0.9 * (60 + x / 2 + 10) + 0.1 * (600 + 5 * x / 2 + 120)
    assert given["waste"] == pytest.approx(1 - 300 / x * (1 - cost / 10800), rel=1e-12)


def test_tiered_node_loss_and_power_loss():
    # More power loss wastes more; a node loss without replicas is a power loss.
    shares = [(1.0, 0.0, 0.0), (0.7, 0.0, 0.3), (0.0, 0.0, 1.0)]
    wastes = [plan.tiered(**{**TIER, "crash_share": c, "node_loss_share": n, "power_loss_share": p}, memory_interval=300,
                          persist_every=4)["waste"] for c, n, p in shares]
    assert wastes[0] < wastes[1] < wastes[2]
    unreplicated = plan.tiered(**TIER, replicated=False, memory_interval=300, persist_every=4)
    powered = plan.tiered(**{**TIER, "node_loss_share": 0.0, "power_loss_share": 0.4}, memory_interval=300, persist_every=4)
    assert unreplicated["waste"] == pytest.approx(powered["waste"], rel=1e-14)


def test_tiered_simulation_agrees_and_is_seeded():
    a = plan.tiered(**TIER, simulate=100, seed=3)
    b = plan.tiered(**TIER, simulate=100, seed=3)
    assert a == b
    assert a["standard_error"] > 0
    # The closed form within 4 standard errors plus 10% of itself (spec/PLAN.md 10.6).
    assert abs(a["simulated_waste"] - a["waste"]) <= 4 * a["standard_error"] + 0.1 * a["waste"]
    assert plan.tiered(**TIER, simulate=100, seed=4)["simulated_waste"] != a["simulated_waste"]


def test_tiered_simulation_follows_the_checkpointers_ring_and_skips():
    # spec/PLAN.md 10.5.1: a promotion durable 2.5 s after its stall, a capture every second, every third
    # promoted. In a ring of 2 the capture two after each promoted one would overwrite its slot: skipped.
    slow = dict(TIER, capture_stall=0.01, replicate_seconds=0.1, persist_stall=0.0, persist_seconds=2.5, mtbf=60.0,
                crash_share=1.0, node_loss_share=0.0, power_loss_share=0.0, memory_restart=1.0, persistent_restart=1.0)
    at = dict(memory_interval=1.0, persist_every=3, simulate=200, seed=9)
    ring2 = plan.tiered(**slow, **at, memory_slots=2, when_busy="skip")
    ring3 = plan.tiered(**slow, **at, memory_slots=3, when_busy="skip")
    waited = plan.tiered(**slow, **at)
    assert ring2["simulated_skips_per_capture"] == pytest.approx(1 / 3, rel=0.05)
    assert ring3["simulated_skips_per_capture"] == 0 and waited["simulated_skips_per_capture"] == 0
    # A crash goes back one capture further after a skipped one: more waste, which the closed form leaves out.
    assert ring2["simulated_waste"] - ring3["simulated_waste"] > 4 * math.hypot(ring2["standard_error"], ring3["standard_error"])
    assert ring2["waste"] == ring3["waste"] == waited["waste"]
    assert plan.tiered(**slow, **at, memory_slots=0, when_busy="wait") == waited


@pytest.mark.parametrize("call", [
    lambda: plan.single(0, 0, 10800, 300),
    lambda: plan.single(60, -1, 10800, 300),
    lambda: plan.single(60, 0, float("nan"), 300),
    lambda: plan.single(60, 0, 10800, 300, interval=0),
    lambda: plan.job_seconds(60, 0, 10800, 300, 1000, 0),
    lambda: plan.tiered(**{**TIER, "power_loss_share": 0.2}),
    lambda: plan.tiered(**{**TIER, "persist_seconds": -1.0}),
    lambda: plan.tiered(**{**TIER, "mtbf": float("inf")}),
    lambda: plan.tiered(**TIER, persist_every=0),
    lambda: plan.tiered(**TIER, persist_every=-2),
    lambda: plan.tiered(**TIER, memory_interval=-5),
    lambda: plan.tiered(**TIER, simulate=1),
    lambda: plan.tiered(**TIER, simulate=-1),
    lambda: plan.tiered(**TIER, simulate=10, memory_slots=1),
    lambda: plan.tiered(**TIER, simulate=10, memory_slots=-1),
    lambda: plan.tiered(**TIER, simulate=10, when_busy="sometimes"),
])
def test_invalid_input_raises_invalid_argument(call):
    with pytest.raises(ckpt.InvalidArgumentError):
        call()


def test_costs_beyond_the_mtbf_are_unsupported():
    with pytest.raises(ckpt.UnsupportedError):
        plan.tiered(**{**TIER, "mtbf": 100.0, "capture_stall": 1000.0})
