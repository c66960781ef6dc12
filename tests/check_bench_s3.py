#!/usr/bin/env python3
"""Smoke test of ckpt-bench-s3 (ctest bench_s3_moto, label object): runs it on a small size under the
server tools/s3-test-server.py started and checks that it exits 0 and prints one JSON document with the
four contenders and the two ratios. It asserts nothing about time (benchmarks report; tests never judge
speed on a shared machine).

usage: check_bench_s3.py BENCH [ARGS...]
"""
import json
import subprocess
import sys

EXPECTED = ["raw_save", "ckpt_save", "raw_load", "ckpt_load_verify"]


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    r = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        print(f"{' '.join(sys.argv[1:])} exited {r.returncode}:\n{r.stderr}", file=sys.stderr)
        return 1
    doc = json.loads(r.stdout)
    ids = [m["id"] for m in doc["measurements"]]
    assert ids == EXPECTED, ids
    for m in doc["measurements"]:
        assert m["best_s"] > 0 and m["best_gb_per_s"] > 0, m
        assert len(m["runs_s"]) == doc["repeat"], m
    pairs = [(c["measure"], c["limit"]) for c in doc["ratios"]]
    assert pairs == [("ckpt_save", "raw_save"), ("ckpt_load_verify", "raw_load")], pairs
    for c in doc["ratios"]:
        assert c["ratio"] > 0 and c["target"] == 0.85, c
    assert doc["cpu"]["cores_online"] >= 1 and isinstance(doc["cpu"]["avx512f"], bool), doc["cpu"]
    print(f"ckpt-bench-s3: {len(ids)} contenders, ratios " +
          ", ".join(f"{c['measure']} {c['ratio']:.2f}x" for c in doc["ratios"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
