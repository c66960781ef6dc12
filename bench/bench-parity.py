#!/usr/bin/env python3
"""Parity groups against replicas (spec/TIERS.md 12), measured on this machine with ckpt-bench-tiers.

For each group size N (one MPI rank per simulated node) and each K, and for one replica at the same N:
  1. host memory per rank: the memory root's bytes over the rank's state, after captures with
     memory_keep 2 (replicas: 2 own + 2 held steps; parity: 2 own steps + 2 parity steps of K/(N-K) each);
  2. the background work of a capture: parity encoding ('encoding' -> 'replicating': segments sent, parity
     built and committed) or replication ('replicating' -> wait()), against the staging copy (a memcpy into
     pre-faulted memory) of the same bytes in the same run;
  3. a lost node: node n1's memory root deleted, then a fresh job resumes: rebuilt from parity, or fetched
     from the replica; resume() to every rank's state loaded and checked;
and ckpt-bench-tiers code: ISA-L's encode and decode per GiB against a memcpy.

usage: bench-parity.py [--bench build/ckpt-bench-tiers] [--size 1GiB] [--groups 4,6,8] [--losses 1,2] [--json FILE]
"""
import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_tiers", os.path.join(HERE, "bench-tiers.py"))
bench_tiers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_tiers)


def one(args, n, parity, shm, disk):
    """Capture then resume after node n1 is lost; parity None: one replica."""
    root = tempfile.mkdtemp(prefix="ckpt-bench-parity-", dir=shm)
    persistent = os.path.join(tempfile.mkdtemp(prefix="ckpt-bench-parity-", dir=disk), "persistent")
    try:
        launcher = argparse.Namespace(mpirun=args.mpirun, ranks=n)
        mpirun = bench_tiers.mpirun_command(launcher)
        env = bench_tiers.mpi_env()
        common = ["--root", root, "--persistent", persistent, "--size", args.size, "--json"]
        if parity:
            common += ["--parity", f"{n}:{parity}"]
        cap = bench_tiers.run_json(mpirun + [args.bench, "capture"] + common + ["--repeat", str(args.repeat)], env, "capture", 1800)
        shutil.rmtree(os.path.join(root, "node-n1"))
        res = bench_tiers.run_json(mpirun + [args.bench, "resume"] + common, env, "resume", 1800)
        m0 = cap["memory"][0]
        per_rank = cap["per_rank_bytes"]
        med = cap["median"]
        return {"n": n, "k": parity, "per_rank_bytes": per_rank, "memory_per_state": m0["memory_root_bytes"] / per_rank,
                "parity_bytes": m0.get("parity_bytes", 0), "held_bytes": m0["held_bytes"],
                "background_s": med["encoding_s"] if parity else med["replication_s"], "staging_copy_s": med["staging_copy_s"],
                "background_cpu_s": med["background_user_s"] + med["background_sys_s"],
                "lost_node_load_s": res["load_s"], "resumed_step": res["step"], "sources": res["sources"][1][0] if len(res["sources"]) > 1 and res["sources"][1] else None}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(os.path.dirname(persistent), ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default=os.path.join(os.getcwd(), "build", "ckpt-bench-tiers"), help="the ckpt-bench-tiers binary")
    p.add_argument("--mpirun", default="mpirun", help="the MPI launcher, with any options of its own (default mpirun)")
    p.add_argument("--size", default="1GiB", help="bytes of state across all ranks (default 1GiB)")
    p.add_argument("--groups", default="4,6,8", help="group sizes N, one rank per node (default 4,6,8)")
    p.add_argument("--losses", default="1,2", help="losses K survived (default 1,2)")
    p.add_argument("--repeat", type=int, default=3, help="timed captures per job (default 3)")
    p.add_argument("--shm-dir", default="/dev/shm", help="where the memory roots go (default /dev/shm)")
    p.add_argument("--dir", default=None, help="disk directory for the persistent store (default: beside --bench)")
    p.add_argument("--json", default=None, help="write every figure to FILE")
    args = p.parse_args()
    disk = args.dir or os.path.dirname(os.path.abspath(args.bench))
    rows = []
    try:
        code = []
        for n in (int(x) for x in args.groups.split(",")):
            for k in (int(x) for x in args.losses.split(",")):
                code.append(bench_tiers.run_json([args.bench, "code", "--size", args.size, "--parity", f"{n}:{k}", "--json"],
                                                 bench_tiers.mpi_env(), "code", 600))
        for n in (int(x) for x in args.groups.split(",")):
            rows.append(one(args, n, None, args.shm_dir, disk))
            for k in (int(x) for x in args.losses.split(",")):
                rows.append(one(args, n, k, args.shm_dir, disk))
    except bench_tiers.Failure as e:
        print(f"bench-parity.py: {e}", file=sys.stderr)
        return e.code if hasattr(e, "code") else 2
    m = bench_tiers.machine()
    print(f"Parity groups against one replica, {args.size} across N ranks (one per simulated node); {m['cpu']}, {m['cores']} cores, "
          f"AVX-512 {m['avx512']}")
    print("  redundancy    N  memory/state  background   /copy   CPU s  lost node: load   from")
    for r in rows:
        what = "1 replica" if not r["k"] else f"parity k={r['k']}"
        src = (r["sources"] or "").split(" (")[0]
        print(f"  {what:<12} {r['n']:>2}  {r['memory_per_state']:>11.3f}x  {r['background_s']:>9.3f} s {r['background_s'] / r['staging_copy_s']:>6.1f}x"
              f"  {r['background_cpu_s']:>6.2f}  {r['lost_node_load_s']:>8.3f} s   step {r['resumed_step']}, rank 1: {src}")
    print("  ISA-L per GiB of data:  N:K   encode (all rows)  as the tiers build it   memcpy   decode of one lost segment")
    for c in code:
        print(f"                          {c['group']}:{c['losses']}   {c['encode_s_per_gib']:.3f} s ({c['encode_vs_memcpy']:.2f}x)"
              f"     {c['encode_as_tiers_s_per_gib']:.3f} s ({c['encode_as_tiers_vs_memcpy']:.2f}x)      {c['memcpy_s_per_gib']:.3f} s"
              f"  {c['decode_one_segment_s']:.3f} s ({c['segment_bytes'] / 2**20:.0f} MiB)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(sys.argv), "machine": bench_tiers.machine(), "rows": rows, "code": code}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
