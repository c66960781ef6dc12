#!/usr/bin/env python3
"""Independent check of ckpt-plan: Young's and Daly's intervals and the waste model of spec/PLAN.md,
recomputed with Python's math module alone (no code shared with include/ckpt/store/planner.hpp), compared
with what `ckpt-plan --json` prints for the same inputs; and its --plot output parsed as XML.

    test_plan_oracle.py BINARY_DIR

Exit 0 all passed, 1 a check failed (or ckpt-plan is not built).
"""
import json
import math
import os
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interop_util import built, check, finish, run  # noqa: E402

REL = 1e-9  # relative agreement: both sides evaluate the same closed forms in double precision


def close(a, b, rel=REL):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def young(d, m):
    return math.sqrt(2.0 * d * m)


def daly(d, m):
    # J. T. Daly, FGCS 22 (2006), eq. 37.
    if d >= 2.0 * m:
        return m
    x = d / (2.0 * m)
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - d


def waste(d, w, m, r, tau):
    """1 - tau / A(tau), A(tau) = M e^{(R + min(tau, w))/M} (e^{(max(tau, w) + d)/M} - 1) (spec/PLAN.md 3)."""
    a = m * math.exp((r + min(tau, w)) / m) * (math.exp((max(tau, w) + d) / m) - 1.0)
    return 1.0 - tau / a


# (what, ckpt-plan arguments, MTBF seconds, restart seconds, GPUs, sync (d), async (d, w) or None)
LLAMA_MTBF = 54 * 24 / 419 * 3600.0
CASES = [
    ("60 s sync save, 3 h MTBF", ["--mtbf-hours", "3", "--save-seconds", "60"], 10800.0, 300.0, 1, 60.0, None),
    ("llama3-405b preset, sync and async",
     ["--preset", "llama3-405b", "--gpus", "16384", "--save-seconds", "2.44", "--async-stall-seconds", "0.1",
      "--async-write-seconds", "2.5", "--restart-seconds", "600"],
     LLAMA_MTBF, 600.0, 16384, 2.44, (0.1, 2.5)),
    ("llama3-405b rate on 2048 GPUs", ["--preset", "llama3-405b", "--gpus", "2048", "--save-seconds", "30"],
     LLAMA_MTBF * 16384 / 2048, 300.0, 2048, 30.0, None),
    ("per-GPU rate", ["--gpu-failures-per-hour", "2e-5", "--gpus", "4096", "--save-seconds", "12", "--restart-seconds", "120"],
     3600.0 / (4096 * 2e-5), 120.0, 4096, 12.0, None),
    ("stall above twice the MTBF", ["--mtbf-hours", "0.5", "--save-seconds", "4000", "--restart-seconds", "0"],
     1800.0, 0.0, 1, 4000.0, None),
    ("async only: sync estimated as stall + write",
     ["--mtbf-hours", "1", "--async-stall-seconds", "3", "--async-write-seconds", "200", "--restart-seconds", "60"],
     3600.0, 60.0, 1, 203.0, (3.0, 200.0)),
]


def check_policy(label, p, d, w, m, r, gpus):
    check(p["available"], label + ": available")
    check(close(p["stall_seconds"], d), label + ": stall %g" % d)
    check(close(p["background_seconds"], w), label + ": background %g" % w)
    check(close(p["young_interval_seconds"], young(d, m)), label + ": Young %.6f == %.6f" % (p["young_interval_seconds"], young(d, m)))
    check(close(p["daly_interval_seconds"], daly(d, m)), label + ": Daly %.6f == %.6f" % (p["daly_interval_seconds"], daly(d, m)))
    tau = daly(d, m)
    want = 100 * waste(d, w, m, r, tau)
    check(close(p["waste_percent_at_daly"], want, 1e-7), label + ": waste at Daly %.6f%% == %.6f%%" % (p["waste_percent_at_daly"], want))
    want_y = 100 * waste(d, w, m, r, young(d, m))
    check(close(p["waste_percent_at_young"], want_y, 1e-7), label + ": waste at Young %.6f%% == %.6f%%" % (p["waste_percent_at_young"], want_y))
    check(close(p["lost_gpu_hours_per_day"], want / 100 * 24 * gpus, 1e-7), label + ": lost GPU-hours per day")
    # The model's own optimum: no worse than Daly's, and no better than a dense scan can find.
    best = min(waste(d, w, m, r, m * 10 ** (k / 2000.0)) for k in range(-12000, 1))
    check(p["waste_percent_at_model_optimum"] / 100 <= best + 1e-12, label + ": model optimum no worse than a dense scan")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = os.path.join(sys.argv[1], "ckpt-plan")
    if not built(tool):
        return finish()
    for what, args, m, r, gpus, d_sync, async_cost in CASES:
        code, out, err = run(tool, *args, "--json")
        if not check(code == 0, "%s: exit 0 (stderr: %s)" % (what, err.strip())):
            continue
        doc = json.loads(out)
        check(close(doc["mtbf_seconds"], m), "%s: MTBF %.4f s == %.4f s" % (what, doc["mtbf_seconds"], m))
        check(close(doc["restart_seconds"], r), what + ": restart")
        check(close(doc["gpus"], gpus), what + ": GPUs")
        check_policy(what + " / sync", doc["policies"]["sync"], d_sync, 0.0, m, r, gpus)
        if async_cost is not None:
            check_policy(what + " / async", doc["policies"]["async"], async_cost[0], async_cost[1], m, r, gpus)
        else:
            check(not doc["policies"]["async"]["available"], what + ": async n/a")
    # The preset's source numbers.
    code, out, _ = run(tool, "--preset", "llama3-405b", "--save-seconds", "1", "--json")
    if check(code == 0, "preset: exit 0"):
        preset = json.loads(out)["preset"]
        check((preset["interruptions"], preset["days"], preset["gpus"]) == (419, 54, 16384), "preset: 419 in 54 days on 16384 GPUs")
        check(close(preset["job_mtbf_hours"], 54 * 24 / 419), "preset: job MTBF 3.0931 h")
    # The plot is XML with the optima labelled.
    with tempfile.TemporaryDirectory(prefix="ckpt-plan-oracle-") as work:
        svg = os.path.join(work, "plan.svg")
        code, _, err = run(tool, *CASES[1][1], "--plot", svg)
        if check(code == 0, "plot: exit 0 (%s)" % err.strip()):
            try:
                root = ET.parse(svg).getroot()
                check(root.tag == "{http://www.w3.org/2000/svg}svg", "plot: the root is an SVG element")
                texts = " | ".join("".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text"))
                for label in ("sync Young", "sync Daly", "async Young", "async Daly"):
                    check(label in texts, "plot: labelled '%s'" % label)
                check(len(list(root.iter("{http://www.w3.org/2000/svg}polyline"))) == 2, "plot: two curves")
            except ET.ParseError as e:
                check(False, "plot: parses as XML (%s)" % e)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
