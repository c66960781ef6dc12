#!/usr/bin/env python3
"""How long a save blocks training: ckpt's AsyncSaver against PyTorch DCP's async_save, same state,
same machine, one run, alternating the two systems round by round.

The state is N tensors of S bytes (default 32 x 32 MiB = 1 GiB of float32). DCP's side saves a
torch state_dict with torch.distributed.checkpoint.async_save (single process, no process group)
and times the call (what blocks the training loop) and the call plus .result() (durable on disk).
ckpt's side runs `ckpt-bench --only async` on the same shape, which reports `async_stall` (what
save() blocks), `async_total` (until committed), `staging_copy` (the machine's limit: a copy of the
state into a pre-faulted pool) and `store_commit` (a synchronous save), each the best of --repeat.

    python3 tools/bench-async-vs-dcp.py --bench build/ckpt-bench --dir /tmp --repeat 3 [--json]

Needs torch (PyPI); it is a measurement, not a test, and CI does not run it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def parse_size(text):
    units = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
    t = text.strip().lower()
    digits = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(digits):]
    if not digits or unit not in units:
        raise argparse.ArgumentTypeError(f"not a size: {text}")
    return int(digits) * units[unit]


def dcp_round(torch, dcp, state, scratch):
    target = tempfile.mkdtemp(prefix="dcp-", dir=scratch)
    try:
        start = time.perf_counter()
        future = dcp.async_save(state, checkpoint_id=target)
        blocked = time.perf_counter() - start
        future.result()
        total = time.perf_counter() - start
        os.sync()
        return blocked, total
    finally:
        shutil.rmtree(target, ignore_errors=True)


def ckpt_round(bench, size, tensor_size, scratch):
    out = subprocess.run([bench, "--only", "async", "--size", str(size), "--tensor-size", str(tensor_size), "--dir", scratch,
                          "--repeat", "1", "--json"], check=True, capture_output=True, text=True)
    doc = json.loads(out.stdout)
    rows = {r["id"]: r for r in doc["ckpt"] + doc["limits"]}
    return {k: rows[k]["best_s"] for k in ("async_stall", "async_total", "staging_copy", "store_commit")}, doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default="build/ckpt-bench", help="the ckpt-bench program")
    ap.add_argument("--dir", default="/tmp", help="directory on the file system to measure")
    ap.add_argument("--tensors", type=int, default=32)
    ap.add_argument("--tensor-size", type=parse_size, default=32 << 20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        import torch
        import torch.distributed.checkpoint as dcp
    except ImportError as e:
        print(f"bench-async-vs-dcp: needs torch ({e})", file=sys.stderr)
        return 2
    size = args.tensors * args.tensor_size
    state = {f"layer{i}.weight": torch.randn(args.tensor_size // 4) for i in range(args.tensors)}
    scratch = tempfile.mkdtemp(prefix="bench-async-", dir=args.dir)
    dcp_blocked, dcp_total, ckpt_rows, meta = [], [], [], None
    try:
        dcp_round(torch, dcp, {k: v for k, v in list(state.items())[:1]}, scratch)  # DCP's first call imports and plans
        for _ in range(args.repeat):
            b, t = dcp_round(torch, dcp, state, scratch)
            dcp_blocked.append(b)
            dcp_total.append(t)
            rows, meta = ckpt_round(args.bench, size, args.tensor_size, scratch)
            ckpt_rows.append(rows)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    best = {k: min(r[k] for r in ckpt_rows) for k in ckpt_rows[0]}
    result = {
        "state_bytes": size, "tensors": args.tensors, "repeat": args.repeat, "torch": torch.__version__,
        "cpu": meta["cpu"] if meta else None,
        "dcp_async_save_blocked_s": min(dcp_blocked), "dcp_async_save_total_s": min(dcp_total),
        "ckpt_async_stall_s": best["async_stall"], "ckpt_async_total_s": best["async_total"],
        "ckpt_staging_copy_s": best["staging_copy"], "ckpt_store_commit_s": best["store_commit"],
    }
    result["ckpt_stall_vs_dcp_blocked"] = result["ckpt_async_stall_s"] / result["dcp_async_save_blocked_s"]
    result["ckpt_stall_vs_staging_copy"] = result["ckpt_async_stall_s"] / result["ckpt_staging_copy_s"]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"state: {args.tensors} tensors x {args.tensor_size >> 20} MiB = {size / (1 << 30):.2f} GiB, best of {args.repeat}, "
          f"torch {torch.__version__}")
    print(f"  DCP async_save: blocks {result['dcp_async_save_blocked_s']:.3f} s, durable after {result['dcp_async_save_total_s']:.3f} s")
    print(f"  ckpt AsyncSaver: blocks {result['ckpt_async_stall_s']:.3f} s, durable after {result['ckpt_async_total_s']:.3f} s")
    print(f"  ckpt staging_copy limit {result['ckpt_staging_copy_s']:.3f} s, synchronous store commit {result['ckpt_store_commit_s']:.3f} s")
    print(f"  ckpt blocks {result['ckpt_stall_vs_dcp_blocked']:.3f}x of DCP (target <= 0.25), "
          f"{result['ckpt_stall_vs_staging_copy']:.3f}x of the staging copy (target <= 1.1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
