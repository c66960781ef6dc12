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

CONTENDERS = ["ideal", "torch_save", "dcp", "dcp_async", "ckpt_store", "ckpt_tiered"]
KINDS = ["crash", "node", "power"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("goodput")
    out, plot = base / "goodput.json", base / "goodput.png"
    # Every kind has a share; seed 2's schedule begins power, crash, node, crash, crash (supervisor.failure_schedule).
    args = [sys.executable, "-m", "ckpt.goodput", "--quick", "--seed", "2", "--mix", "crash=0.4,node=0.3,power=0.3",
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
    for name in ("ckpt_store", "ckpt_tiered"):
        assert by_name[name]["bit_identical"], name
        assert by_name[name]["verified_loads"], name
    ideal_digest = by_name["ideal"]["measured"]["digest"]
    for c in doc["contenders"]:
        assert c["bit_identical"] == (c["measured"]["digest"] == ideal_digest and c["measured"]["ranks_agree"]), c["name"]


def test_tiers_resume_from_memory_after_a_crash_and_from_storage_after_a_power_loss(report):
    doc, _, _ = report
    tiered = next(c for c in doc["contenders"] if c["name"] == "ckpt_tiered")
    served = [(r["kind"], r.get("source") or "") for r in tiered["measured"]["recoveries"] if r.get("source")]
    # A crash may need storage right after a power loss emptied memory; most are served from memory.
    assert any(kind == "crash" and "memory" in source and "persistent" not in source for kind, source in served), served
    for kind, source in served:
        if kind == "power":  # every memory tier was wiped
            assert "memory" not in source, (kind, source)


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


def test_the_table_names_every_contender_and_the_setting(report):
    doc, table, plot = report
    for name in CONTENDERS:
        assert name in table
    assert "MTBF" in table and "persistent storage" in table and "seed 2" in table
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    s = doc["setting"]
    assert s["world"] == 4 and s["nodes"] == 2 and s["mtbf_s"] > 0 and s["failures_scheduled"] >= 1
    assert abs(sum(s["mix"].values()) - 1) < 1e-9


def test_usage_errors_exit_2():
    for bad in (["--world", "1"], ["--mix", "meteor=1"], ["--contenders", "pickle"], ["--interval", "0"]):
        p = subprocess.run([sys.executable, "-m", "ckpt.goodput", *bad], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, (bad, p.stderr)
