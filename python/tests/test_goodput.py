"""python -m ckpt.goodput --quick: the whole benchmark on a small job (4 ranks, 2 nodes, 16 MiB of state,
40 steps, failures of every kind on a seeded schedule). Asserts that the run completes and that its
report is well-formed and consistent with itself; never asserts on times."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")

CONTENDERS = ["ideal", "torch_save", "dcp", "dcp_async", "ckpt_store", "ckpt_tiered", "ckpt_tiered_parity"]
KINDS = ["crash", "node", "power"]
SEED = 118  # the failure schedule's (the report fixture says why this one)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("goodput")
    out, plot = base / "goodput.json", base / "goodput.png"
    # Every kind has a share. Seed 118's schedule (supervisor.failure_schedule; MTBF = the ideal run's time W / 4)
    # begins crash at 0.31 W, crash 0.61 W, power 0.70 W, node 0.94 W, node 1.15 W: the first two crashes come
    # before anything wipes memory and long after the first capture (step 0, a few hundredths of W in), so the
    # tiers' memory holds a step in them however the machine's load stretches the job against W; the power loss
    # and the first node loss each come long enough after the failure before them to be resumed (a restart and
    # its load take a few hundredths of W).
    # (Seed 2's began power, crash 0.06 MTBF later, node, crash, crash: under load its only crash to resume
    # came right after the power loss, with memory empty, and the later ones after the job had finished.)
    args = [sys.executable, "-m", "ckpt.goodput", "--quick", "--seed", str(SEED), "--mix", "crash=0.4,node=0.3,power=0.3",
            "--dir", str(base / "run"), "--json", str(out), "--plot", str(plot)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=str(base))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    doc = json.loads(out.read_text())
    return doc, p.stdout, plot


def test_every_contender_finishes_the_job(report):
    doc, _, _ = report
    assert [c["name"] for c in doc["contenders"]] == CONTENDERS
    for c in doc["contenders"]:
        assert "error" not in c, c.get("error")
        assert c["measured"]["completed"], c["name"]


def test_goodput_is_the_ideal_time_over_the_contenders_time(report):
    doc, _, _ = report
    ideal = doc["setting"]["ideal_wall_s"]
    for c in doc["contenders"]:
        m = c["measured"]
        assert c["goodput"] == pytest.approx(ideal / m["wall_s"], rel=1e-9), c["name"]
        assert 0 < c["goodput"]
    assert doc["contenders"][0]["goodput"] == 1.0


def test_rework_adds_up_from_the_recoveries(report):
    """Steps trained again are exactly the sum of what each failure rolled the job back."""
    doc, _, _ = report
    steps = doc["setting"]["steps"]
    for c in doc["contenders"][1:]:
        m = c["measured"]
        assert m["steps_executed"] == steps + m["steps_recomputed"], c["name"]
        assert m["steps_recomputed"] == sum(r["lost_steps"] for r in m["recoveries"]), c["name"]
        assert all(r["lost_steps"] >= 0 for r in m["recoveries"]), c["name"]
        assert len(m["recoveries"]) == m["failures"] == sum(m["failures_by_kind"].values()), c["name"]
        assert m["failures"] >= 1, c["name"]
        assert m["saves"] >= 1 and m["blocked_s"] >= 0, c["name"]
        for r in m["recoveries"]:
            assert r["kind"] in KINDS
            if not r["interrupted"]:
                assert r["restart_s"] >= 0 and r["load_s"] >= 0 and r["to_first_step_s"] >= r["restart_s"]
                # The restart's parts (kill to the new process, group, model, contender) are each measured and
                # lie within it.
                parts = r["restart_parts_s"]
                assert set(parts) == {"reap_fork", "group", "model", "contender"}
                assert all(v >= 0 for v in parts.values()) and sum(parts.values()) <= r["restart_s"] + 1e-6, parts


def test_the_same_schedule_hits_every_contender(report):
    """Failures come from one seeded schedule: every contender's n-th failure is the schedule's n-th."""
    doc, _, _ = report
    schedule = doc["setting"]["schedule"]
    for c in doc["contenders"][1:]:
        kinds = [r["kind"] for r in c["measured"]["recoveries"]][:len(schedule)]
        assert kinds == [f["kind"] for f in schedule[:len(kinds)]], c["name"]


def test_ckpt_contenders_resume_bit_identically_and_verify_every_load(report):
    doc, _, _ = report
    by_name = {c["name"]: c for c in doc["contenders"]}
    for name in ("ckpt_store", "ckpt_tiered", "ckpt_tiered_parity"):
        assert by_name[name]["bit_identical"], name
        assert by_name[name]["verified_loads"], name
    ideal_digest = by_name["ideal"]["measured"]["digest"]
    for c in doc["contenders"]:
        assert c["bit_identical"] == (c["measured"]["digest"] == ideal_digest and c["measured"]["ranks_agree"]), c["name"]


def _newest(steps):
    return max(steps) if steps else None


def test_tiers_resume_from_memory_after_a_crash_and_from_storage_after_a_power_loss(report):
    """Judged against what each tier held when the job resumed (job.tier_evidence, read with ckpt.inspect
    just before the resume and after the failure wiped what it wiped): the newest step either tier held is
    the one resumed, never an older one; from memory alone when memory held it whole (both nodes' memory
    together: every shard has an own copy or a replica there), so never from storage for a step memory
    had; from storage only when storage held a newer step. After a power loss memory held nothing and no
    resume claims it. And the run has a crash that found a step in memory, so the memory path is tested."""
    doc, _, _ = report
    tiered = next(c for c in doc["contenders"] if c["name"] == "ckpt_tiered")
    recoveries = tiered["measured"]["recoveries"]
    loads = [r for r in recoveries if "resumed_step" in r]  # a failure whose relaunch got as far as its resume
    assert loads, recoveries

    def show(r):
        return (f"{r['kind']} at {r['at']:.2f} s{' (interrupted)' if r['interrupted'] else ''}: "
                + (f"memory held {r.get('memory_steps')}, storage {r.get('storage_steps')}, resumed {r.get('source')!r}"
                   if "resumed_step" in r else "interrupted before it resumed"))

    for r in loads:
        assert "memory_steps" in r and "storage_steps" in r, (r.get("evidence_error"), r)
        memory, storage, source = _newest(r["memory_steps"]), _newest(r["storage_steps"]), r["source"]
        if memory is None and storage is None:
            assert source is None and r["resumed_step"] == 0, show(r)  # nothing held: a fresh start
            continue
        newest = max(s for s in (memory, storage) if s is not None)
        assert source is not None and source.startswith(f"step {newest} from ") and r["resumed_step"] == newest + 1, show(r)
        if memory is not None and (storage is None or memory >= storage):
            assert "memory" in source and "persistent" not in source, show(r)
        else:
            assert "persistent" in source, show(r)
        if r["kind"] == "power":  # every memory tier was wiped
            assert r["memory_steps"] == [] and "memory" not in source, show(r)
    served = [r for r in loads if r["kind"] == "crash" and r["memory_steps"]
              and _newest(r["memory_steps"]) >= (_newest(r["storage_steps"]) if r["storage_steps"] else -1)]
    assert served, ("no crash found a step in memory at least as new as storage's, so none could be served from "
                    "memory: each came before the job had captured a step since the start or the last power loss, "
                    "interrupted another recovery, or came after the job had finished (failures skipped). "
                    "Recoveries: " + "; ".join(show(r) for r in recoveries))


def test_every_contender_has_a_planned_interval_and_a_prediction(report):
    doc, _, _ = report
    for c in doc["contenders"][1:]:
        assert c["interval_steps"] >= 1, c["name"]
        assert c["predicted_goodput"] is None or 0 < c["predicted_goodput"] <= 1, c["name"]
        costs = c["costs"]
        assert costs["restart"] > 0 and costs["interference"] >= 0, c["name"]
        # Every save blocks for something (a sync save for all of it); an async one has time behind it.
        assert costs.get("stall", costs.get("capture_stall", 0)) > 0, (c["name"], costs)
        if c["name"] in ("dcp_async", "ckpt_store"):
            assert costs["background"] > 0, (c["name"], costs)
    tiered = doc["contenders"][-1]
    assert tiered["persist_every_steps"] % tiered["interval_steps"] == 0
    # The tiers are predicted with the kinds the schedule holds over the predicted run, not --mix's shares.
    mix = tiered.get("predicted_mix")
    if tiered["predicted_goodput"] is not None and mix is not None:
        kinds = [f["kind"] for f in sorted(doc["setting"]["schedule"], key=lambda f: f["at"])]
        assert any(all(abs(mix[k] - kinds[:n].count(k) / n) < 1e-9 for k in ("crash", "node", "power"))
                   for n in range(1, len(kinds) + 1)), mix
    # The tiers' background times are the overlapped captures' where the calibration had any (calibration.py).
    assert all(tiered["costs"][k + "_from"] in ("overlapped", "waited") for k in ("capture_stall", "replicate_seconds"))


def test_the_table_names_every_contender_and_the_setting(report):
    doc, table, plot = report
    for name in CONTENDERS:
        assert name in table
    assert "MTBF" in table and "persistent storage" in table and f"seed {SEED}," in table
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    s = doc["setting"]
    assert s["world"] == 4 and s["nodes"] == 2 and s["mtbf_s"] > 0 and s["failures_scheduled"] >= 1
    assert abs(sum(s["mix"].values()) - 1) < 1e-9


def _calibration_events(stalls, computes, waited, phases=None, skipped=()):
    """A calibration launch's events: a save after every step, the first `waited` of them waited for, steps one
    second apart. `phases`: {step: {phase: seconds after that step's save}} for the tiers' ``phase`` events."""
    events = []
    for step, (stall, compute) in enumerate(zip(stalls, computes)):
        events.append({"ev": "step", "t": 10.0 * step, "step": step, "compute": compute})
        save = {"ev": "save", "t": 10.0 * step + stall, "step": step, "seconds": stall}
        if step < waited:
            save["background"] = 2.0 if step % 2 == 0 else 1.0
        if step in skipped:
            save["skipped"] = True
        events.append(save)
        for phase, after in (phases or {}).get(step, {}).items():
            events.append({"ev": "phase", "t": save["t"] + after, "phase": phase, "step": step})
    return events


def test_calibration_leaves_out_the_rings_first_captures_and_charges_promotions_their_own_interference():
    """The tiers' first two captures each fill a memory slot for the first time (5 s here): neither is a
    capture's stall. A promotion's background work (2 s when waited for) runs twice as long as a capture's
    (1 s): of the 0.9 s a cycle of a promoted capture and a capture slows training, each capture is charged
    0.3 s and the promotion its extra 0.3 s, wherever in the cycle the slowdown lands. A promotion longer
    than a step slows the step after the next capture (0.6 s there, 0.3 s after the promoted one): charged
    per step, every capture would pay 0.6 s and promotions nothing, and the plan promote at every capture."""
    from ckpt.goodput.calibration import save_costs

    stalls = [5.0, 5.0, 0.5, 0.2, 0.5, 0.2] + [0.5, 0.2] * 3
    for after_promoted, after_capture in ((0.7, 0.2), (0.3, 0.6)):
        slowed = [1.0 + after_promoted, 1.0 + after_capture] * 2 + [1.0 + after_promoted]
        computes = [1.0] * 7 + slowed  # steps 7, 9, 11 follow promoted 6, 8, 10; 8, 10 follow 7, 9
        costs = save_costs(_calibration_events(stalls, computes, waited=6), 1.0, tiered=True, warmup=2)
        assert costs["capture_stall"] == pytest.approx(0.2)
        assert costs["persist_stall"] == pytest.approx(0.3)
        assert costs["replicate_seconds"] == pytest.approx(1.0) and costs["persist_seconds"] == pytest.approx(2.0)
        assert costs["interference"] == pytest.approx(0.3)
        assert costs["persist_interference"] == pytest.approx(0.3)
        assert costs["replicate_seconds_from"] == "waited" and costs["capture_stall_from"] == "overlapped"
    # Too few overlapped saves for a whole cycle: each step charged to the save before it.
    short = save_costs(_calibration_events(stalls[:8], [1.0] * 7 + [1.7], waited=6), 1.0, tiered=True, warmup=2)
    assert short["interference"] == 0.0 and short["persist_interference"] == pytest.approx(0.7)
    # A single save: one kind, every overlapped save's step alike, the first waited save left out.
    single = save_costs(_calibration_events([3.0, 1.0, 1.0, 1.0] + [1.0] * 4, [1.0] * 5 + [1.4] * 3, waited=4), 1.0, tiered=False)
    assert single == pytest.approx({"interference": 0.4, "stall": 1.0, "background": 1.0})


def test_calibration_times_the_tiers_background_as_the_run_sees_it():
    """Waited for, a capture replicates in 1 s and a promotion persists in 2 s; overlapped with training (its
    ``phase`` events after each overlapped capture's save) they took 3 s and 8 s, and the captures stalled 0.4 s and
    0.9 s, not 0.2 s and 0.5 s: the plan gets the overlapped figures, the waited ones stay beside them. A skipped
    capture has no background (its 0.05 s is no stall), and the first phase of a step counts."""
    from ckpt.goodput.calibration import save_costs

    stalls = [5.0, 5.0, 0.5, 0.2, 0.5, 0.2] + [0.9, 0.4, 0.9, 0.05, 0.9, 0.4]
    phases = {6: {"replicated": 3.0, "persisted": 8.0}, 7: {"replicated": 3.5}, 8: {"replicated": 2.5, "persisted": 8.0},
              10: {"replicated": 3.0, "persisted": 9.0}, 11: {"replicated": 2.0}}
    events = _calibration_events(stalls, [1.0] * 12, waited=6, phases=phases, skipped=(9,))
    events.append({"ev": "phase", "t": 1000.0, "phase": "replicated", "step": 7})  # a second one (never): the first counts
    costs = save_costs(events, 1.0, tiered=True, warmup=2)
    assert costs["capture_stall"] == pytest.approx(0.4) and costs["capture_stall_alone"] == pytest.approx(0.2)
    assert costs["persist_stall"] == pytest.approx(0.5) and costs["persist_stall_alone"] == pytest.approx(0.3)
    assert costs["replicate_seconds"] == pytest.approx(3.0) and costs["replicate_seconds_alone"] == pytest.approx(1.0)
    assert costs["persist_seconds"] == pytest.approx(8.0) and costs["persist_seconds_alone"] == pytest.approx(2.0)
    assert all(costs[k + "_from"] == "overlapped" for k in ("capture_stall", "replicate_seconds", "persist_stall", "persist_seconds"))


def _planner(step_s: float, mtbf: float, steps: int, mix: dict):
    """The benchmark's planner alone (no run): its args, the ideal step and the MTBF the plan is made for."""
    from types import SimpleNamespace

    from ckpt.goodput.__main__ import Bench

    b = object.__new__(Bench)
    b.args = SimpleNamespace(seed=1, steps=steps, interval=None, persist_every=None, nodes=2, mix=mix)
    b.step_s, b.mtbf = step_s, mtbf
    return b


def test_the_plan_picks_whole_steps_by_the_models_timeline_not_its_first_order_form():
    """The tiers as calibrated in an accelerator run (1 s steps, a failure every 3 s): the closed form's
    optimum promotes every second capture, but its timeline (the Monte Carlo) wastes less promoting every
    one, and that policy is chosen. A single save's model is exact: the better of the whole steps around
    its optimum."""
    import math

    from ckpt import plan

    b = _planner(1.0, 3.0, 30, {"crash": 0.6, "node": 0.3, "power": 0.1})
    costs = {"interference": 0.0, "capture_stall": 0.034, "replicate_seconds": 0.21, "persist_stall": 0.002,
             "persist_seconds": 0.56, "persist_interference": 0.0, "restart": 0.6, "persistent_restart": 1.19}
    assert plan.tiered(**b._model("ckpt_tiered", costs, 3.0))["optimum_persist_every"] == 2
    entry = b.plan("ckpt_tiered", costs)
    assert (entry["interval_steps"], entry["persist_every_k"]) == (1, 1)
    assert entry["waste"] < b._waste("ckpt_tiered", costs, 1, 2, 3.0)["waste"]
    single = {"stall": 0.3, "interference": 0.0, "background": 1.0, "restart": 1.0}
    optimum = plan.single(**b._model("dcp", single, 3.0))["optimum_seconds"]
    around = {max(1, math.floor(optimum)), math.ceil(optimum)}
    chosen = b.plan("dcp", single)
    assert chosen["interval_steps"] in around
    assert chosen["waste"] == min(b._waste("dcp", single, n, None, 3.0)["waste"] for n in around)


def test_the_tiers_plan_counts_the_captures_a_promotion_outlasting_the_ring_skips():
    """The CPU profile's shape (3 s steps, a failure every 13 s, a promotion durable 7 s after its stall): captured
    every step and promoted every third, the capture two after a promoted one would overwrite the slot the
    promotion still reads, and the checkpointer skips it (ring of 2, spec/PLAN.md 10.5.1). The plan's Monte Carlo
    counts those skips, so it predicts more waste than the same rules with a ring of 3, which takes every capture."""
    from ckpt import plan

    b = _planner(3.0, 12.9, 40, {"crash": 0.4, "node": 0.3, "power": 0.3})
    costs = {"interference": 0.0, "capture_stall": 0.01, "replicate_seconds": 0.9, "persist_stall": 0.0,
             "persist_seconds": 7.0, "persist_interference": 0.0, "restart": 3.0, "persistent_restart": 6.0}
    at = b._waste("ckpt_tiered", costs, 1, 3, 12.9)
    assert at["predicted_skips_per_capture"] > 0.2
    every_capture = plan.tiered(**b._model("ckpt_tiered", costs, 12.9), memory_interval=3.0, persist_every=3, simulate=400,
                                seed=1, memory_slots=3, when_busy="skip")
    assert every_capture["simulated_skips_per_capture"] == 0
    assert at["waste"] > every_capture["simulated_waste"] + 4 * every_capture["standard_error"]


def test_lost_time_adds_up_from_its_parts_and_a_failure_cuts_off_training_or_a_save():
    """A synthetic log (ideal step 1 s, 3 steps; start-up 0.1 s longer than the ideal run's): a crash 0.4 s into step 2; after its recovery a node loss
    0.2 s into the save of step 2, and a power loss during that recovery (one span, the first restart
    interrupted). Every part is what the log says; they add up to the wall time over the ideal run's."""
    from ckpt.goodput.report import lost_time, measure, tiers_against_best_other

    def ready(t, entered, contender):
        return {"ev": "ready", "t": t, "entered": entered, "group_s": 0.1, "model_s": 0.2, "contender_s": contender}

    events = [
        {"ev": "launch", "t": 0.0}, ready(0.5, 0.0, 0.1), {"ev": "loaded", "t": 0.6, "next_step": 0},
        {"ev": "step", "t": 1.6, "step": 0, "compute": 1.0}, {"ev": "saving", "t": 1.6}, {"ev": "save", "t": 1.8, "seconds": 0.2},
        {"ev": "step", "t": 2.9, "step": 1, "compute": 1.1}, {"ev": "saving", "t": 2.9}, {"ev": "save", "t": 3.0, "seconds": 0.1},
        {"ev": "failure", "t": 3.4, "kind": "crash"},                   # 0.4 s of step 2 cut off
        ready(4.0, 3.5, 0.2), {"ev": "loaded", "t": 4.3, "next_step": 2},  # restart 0.6 (setup 0.2), load 0.3
        {"ev": "step", "t": 5.4, "step": 2, "compute": 1.0}, {"ev": "saving", "t": 5.4},
        {"ev": "failure", "t": 5.6, "kind": "node"},                    # 0.2 s of a save cut off
        ready(6.0, 5.7, 0.0),                                           # restart 0.4, then cut short
        {"ev": "failure", "t": 6.1, "kind": "power"},                   # inside the node loss's recovery
        ready(6.6, 6.2, 0.1), {"ev": "loaded", "t": 6.8, "next_step": 2},  # restart 0.5 (setup 0.1), load 0.2
        {"ev": "step", "t": 7.9, "step": 2, "compute": 1.0}, {"ev": "trained", "t": 7.9, "step": 3},
    ]
    m = measure(events, 3)
    assert m["cut_off_s"] == pytest.approx({"training": 0.4, "save": 0.2})
    assert m["recovery_s"] == pytest.approx((4.3 - 3.4) + (6.8 - 5.6))  # failure to the `loaded` that trains on
    assert m["startup_s"] == pytest.approx(0.6)
    lt = lost_time(m, {"wall_s": 3.5, "startup_s": 0.5}, step_s=1.0)
    expected = {"startup": 0.1, "blocked": 0.3, "slower": 0.1, "recomputed": 1.0, "cut_off_training": 0.4, "cut_off_save": 0.2,
                "restart": 1.5 - 0.3, "setup": 0.3, "load": 0.5, "recovery_other": 2.1 - 1.5 - 0.5,
                "other": 0.2}  # two gaps of 0.1 s from `loaded` to the first step
    assert lt["parts_s"] == pytest.approx(expected, abs=1e-9)
    assert lt["lost_s"] == pytest.approx(4.4) == pytest.approx(sum(lt["parts_s"].values()))
    assert lt["floor_s"] == pytest.approx(0.4 + 1.2) and lt["above_floor_s"] == pytest.approx(4.4 - 1.6)
    # A failure before the first launch's `loaded` ends its start-up and cuts off no training; one after it,
    # before any step is logged, cuts off training.
    early = measure([{"ev": "launch", "t": 0.0}, {"ev": "failure", "t": 0.3, "kind": "crash"}, ready(0.9, 0.4, 0.1),
                     {"ev": "loaded", "t": 1.0, "next_step": 0}, {"ev": "step", "t": 2.0, "step": 0, "compute": 1.0}], 1)
    assert early["startup_s"] == pytest.approx(0.3) and early["cut_off_s"] == {"training": 0.0, "save": 0.0}
    assert early["recovery_s"] == pytest.approx(0.7)
    mid = measure([{"ev": "launch", "t": 0.0}, ready(0.2, 0.0, 0.0), {"ev": "loaded", "t": 0.3, "next_step": 0},
                   {"ev": "failure", "t": 1.0, "kind": "crash"}, ready(1.5, 1.1, 0.0), {"ev": "loaded", "t": 1.6, "next_step": 0},
                   {"ev": "step", "t": 2.6, "step": 0, "compute": 1.0}], 1)
    assert mid["startup_s"] == pytest.approx(0.3) and mid["cut_off_s"] == pytest.approx({"training": 0.7, "save": 0.0})
    assert mid["recovery_s"] == pytest.approx(0.6)
    # The target's ratio: the best tiered contender against the least-lost other that finished.
    row = lambda name, lost, floor: {"name": name, "lost": {"lost_s": lost, "above_floor_s": lost - floor}}  # noqa: E731
    got = tiers_against_best_other([row("dcp", 10.0, 6.0), row("torch_save", 12.0, 6.0), row("ckpt_tiered", 8.0, 6.0),
                                    row("ckpt_tiered_parity", 9.0, 6.0), {"name": "ckpt_store", "error": "x"}],
                                   {"ckpt_tiered", "ckpt_tiered_parity"})
    assert got == pytest.approx({"tiers": "ckpt_tiered", "other": "dcp", "lost_ratio": 0.8, "above_floor_ratio": 0.5})


def test_usage_errors_exit_2():
    for bad in (["--world", "1"], ["--mix", "meteor=1"], ["--contenders", "pickle"], ["--interval", "0"]):
        p = subprocess.run([sys.executable, "-m", "ckpt.goodput", *bad], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, (bad, p.stderr)


def test_the_accelerator_profile_waits_out_device_time_and_stays_bit_identical(tmp_path):
    """--profile accelerator on a machine without one: each step waits its device time around a cheap
    deterministic update, the host's cores free; the tiers still resume bit-identically under failures with
    their store behind a paced link (--storage-gbps), and the report says which profile and link ran and counts
    the tiers' skipped captures."""
    out = tmp_path / "goodput.json"
    args = [sys.executable, "-m", "ckpt.goodput", "--quick", "--profile", "accelerator", "--device-step", "0.2",
            "--contenders", "ckpt_tiered", "--seed", str(SEED), "--mix", "crash=0.4,node=0.3,power=0.3",
            "--storage-gbps", "0.5", "--dir", str(tmp_path / "run"), "--json", str(out)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["setting"]["profile"].startswith("accelerator, emulated"), doc["setting"]["profile"]
    assert [c["name"] for c in doc["contenders"]] == ["ideal", "ckpt_tiered"]
    tiered = doc["contenders"][1]
    assert tiered["measured"]["completed"] and tiered["bit_identical"], tiered
    assert tiered["measured"]["failures"] >= 1
    assert tiered["measured"]["skips"] >= 0 and tiered["measured"]["saves"] >= 1
    # --storage-gbps: the persistent store behind the node's link; the launch that finished moved bytes across it.
    assert doc["setting"]["storage_gbps"] == 0.5 and "0.5 GB/s per node" in doc["setting"]["storage"]
    with open(tmp_path / "run" / "events-ckpt_tiered-run.jsonl") as f:
        done = [e for e in map(json.loads, f) if e["ev"] == "done"]
    moved, busy = done[-1]["storage"]
    assert moved > 0 and busy > 0, done[-1]


PACED = r"""
import json, os, sys
import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from ckpt import Store
from ckpt.goodput import storage

base = sys.argv[1]
root, memory = os.path.join(base, "storage"), os.path.join(base, "memory")
os.makedirs(root)
os.makedirs(memory)
def size(path):
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(path) for n in ns) if os.path.isdir(path) else os.path.getsize(path)
out, before = {}, 0
def charged(key, path):
    global before
    now = storage.stats()[0]
    out[key] = {"charged": now - before, "size": size(path)}
    before = now
state = {"w": torch.arange(1 << 18, dtype=torch.float32)}  # 1 MiB
storage.pace(root, memory, 0, 1000.0)  # a fast link: what crosses it is counted, the run stays short
with open(os.path.join(memory, "slot"), "wb") as f:  # outside the root: never paced
    f.write(b"x" * 4096)
charged("outside", os.path.join(memory, "slot"))
with open(os.path.join(root, "a.pt"), "wb") as f:
    torch.save(state, storage.PacedStream(f, os.path.join(root, "a.pt")))
charged("torch_save", os.path.join(root, "a.pt"))
w = dcp.FileSystemWriter(os.path.join(root, "dcp"))
w.fs = storage.dcp_file_system()
dcp.save(state, storage_writer=w)
charged("dcp_save", os.path.join(root, "dcp"))
r = dcp.FileSystemReader(os.path.join(root, "dcp"))
r.fs = storage.dcp_file_system()
back = {"w": torch.zeros(1 << 18)}
dcp.load(back, storage_reader=r)
assert torch.equal(back["w"], state["w"])
charged("dcp_load", os.path.join(root, "dcp"))
dcp.load(back, storage_reader=r)  # the node's read cache holds it
charged("dcp_load_again", os.path.join(root, "dcp"))
storage.forget_reads(memory)  # a new launch: cold caches
dcp.load(back, storage_reader=r)
charged("dcp_load_cold", os.path.join(root, "dcp"))
with Store(os.path.join(root, "store"), create=True) as s:
    s.save(1, {"w": state["w"].numpy()})
charged("store_save", os.path.join(root, "store"))
print(json.dumps(out))
"""


def test_paced_storage_charges_every_contenders_persistent_bytes_to_the_nodes_link(tmp_path):
    """--storage-gbps (ckpt/goodput/storage.py): torch.save's and DCP's streams and ckpt's own stores all cross
    the node's link with every byte they write under the contender's storage and every block they read that the
    node's read cache does not hold, and with nothing outside it."""
    p = subprocess.run([sys.executable, "-c", PACED, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["outside"]["charged"] == 0
    assert got["torch_save"]["charged"] == got["torch_save"]["size"] > 1 << 20
    assert got["dcp_save"]["charged"] == got["dcp_save"]["size"] > 1 << 20
    assert 1 << 20 <= got["dcp_load"]["charged"] <= got["dcp_load"]["size"]  # every block once: the node's read cache
    assert got["dcp_load_again"]["charged"] == 0
    assert got["dcp_load_cold"]["charged"] == got["dcp_load"]["charged"]
    # The store writes every byte of its files (shards, journal) once; a journal is also read back to open it.
    assert got["store_save"]["charged"] >= 1 << 20
    assert got["store_save"]["charged"] <= 2 * got["store_save"]["size"]
