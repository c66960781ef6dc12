#!/usr/bin/env python3
"""ckpt's store on S3 against PyTorch DCP's fsspec writer and reader on the same server, in one run
(issue 23 "What to measure"). Round after round, alternating:

  1. `ckpt-bench-s3 --json --repeat 1` on the same size, connections and part size: the server's raw
     throughput (a plain multipart upload, ranged GETs) and ckpt's save and load (every chunk verified);
  2. DCP: torch.distributed.checkpoint.save with FsspecWriter (s3fs) of the same bytes as BF16 tensors
     (thread_count = --connections: DCP's knob for parallel uploads), then load with FsspecReader into
     preallocated tensors (DCP verifies nothing; the bytes are compared afterwards, untimed).

Prints one table (best of the rounds, median beside it, and each contender as a ratio to raw) and, with
--json FILE, the document. Needs the server in AWS_ENDPOINT_URL and a bucket URL in --url or
CKPT_S3_TEST_URL, as tools/s3-test-server.py exports:

  python3 tools/s3-test-server.py --server seaweedfs run -- python3 bench/bench-s3-dcp.py --size 1GiB

s3fs comes with the pinned environment (tools/requirements.txt, build/venv: run this with its python3);
without it the DCP rows are skipped with a message and ckpt's are still printed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text):
    t = text.strip().lower()
    for suffix in ("ib", "b"):
        if t.endswith(suffix) and t[:-len(suffix)][-1:].isalpha():
            t = t[:-len(suffix)]
            break
    unit = t[-1] if t and t[-1].isalpha() else ""
    number = t[:-1] if unit else t
    if unit not in UNITS:
        raise argparse.ArgumentTypeError(f"not a byte count: {text}")
    return int(float(number) * UNITS[unit])


def import_s3fs():
    """s3fs, or None and why it cannot be had (never installed here: versions come from tools/constraints.txt)."""
    try:
        import s3fs  # noqa: F401
        return s3fs, None
    except ImportError as exc:
        return None, f"s3fs does not import in {sys.executable} ({exc}): run under build/venv (tools/install-deps.sh)"


def run_ckpt(args):
    """One round of ckpt-bench-s3: {id: seconds} for raw_save, ckpt_save, raw_load, ckpt_load_verify."""
    cmd = [args.bench, "--json", "--repeat", "1", "--size", str(args.size), "--connections", str(args.connections),
           "--part-size", str(args.part_size), "--tensor-size", str(args.tensor_size), "--url", args.url]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    doc = json.loads(r.stdout)
    return {m["id"]: m["best_s"] for m in doc["measurements"]}, doc


class Dcp:
    def __init__(self, args, s3fs):
        import torch
        self.torch = torch
        self.args = args
        endpoint = os.environ.get("AWS_ENDPOINT_URL")
        self.storage = {"key": os.environ.get("AWS_ACCESS_KEY_ID"), "secret": os.environ.get("AWS_SECRET_ACCESS_KEY"),
                        "client_kwargs": {"region_name": os.environ.get("AWS_REGION", "us-east-1")}}
        if endpoint:
            self.storage["client_kwargs"]["endpoint_url"] = endpoint
        self.fs = s3fs.S3FileSystem(**self.storage)
        base = args.url[len("s3://"):].rstrip("/")
        self.base = f"{base}/bench-s3-dcp-{uuid.uuid4().hex[:12]}"
        g = torch.Generator().manual_seed(0x636B7074)
        self.state, self.target = {}, {}
        done, k = 0, 0
        while done < args.size:
            n = min(args.tensor_size, args.size - done)
            bits = torch.randint(-(2**15), 2**15 - 1, (n // 2,), dtype=torch.int16, generator=g)
            self.state[f"layers.{k:03d}.weight"] = bits.view(torch.bfloat16)
            self.target[f"layers.{k:03d}.weight"] = torch.empty(n // 2, dtype=torch.bfloat16)
            done += n
            k += 1
        self.round = 0

    def save_and_load(self):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FsspecReader, FsspecWriter
        path = f"s3://{self.base}/step-{self.round}"
        # DCP warns, per save, that s3fs streams cannot fsync and that no process group is initialised.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.distributed\.checkpoint.*")
        self.round += 1
        start = time.perf_counter()
        dcp.save(self.state, storage_writer=FsspecWriter(path, thread_count=self.args.connections, **self.storage))
        save_s = time.perf_counter() - start
        for t in self.target.values():
            t.zero_()
        start = time.perf_counter()
        dcp.load(self.target, storage_reader=FsspecReader(path, **self.storage))
        load_s = time.perf_counter() - start
        for name, t in self.state.items():  # untimed: DCP checks nothing itself
            if not self.torch.equal(t.view(self.torch.int16), self.target[name].view(self.torch.int16)):
                raise RuntimeError(f"DCP loaded different bytes for {name}")
        self.fs.rm(path, recursive=True)
        return save_s, load_s

    def cleanup(self):
        try:
            self.fs.rm(self.base, recursive=True)
        except (FileNotFoundError, OSError):
            pass


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=os.environ.get("CKPT_S3_TEST_URL"), help="s3://bucket/prefix (default $CKPT_S3_TEST_URL)")
    p.add_argument("--size", type=parse_size, default=1 << 30, help="bytes of tensors (default 1GiB)")
    p.add_argument("--connections", type=int, default=8, help="requests in flight; DCP's thread_count (default 8)")
    p.add_argument("--part-size", type=parse_size, default=8 << 20, help="ckpt's part and GET size (default 8MiB)")
    p.add_argument("--tensor-size", type=parse_size, default=32 << 20, help="bytes per tensor (default 32MiB)")
    p.add_argument("--repeat", type=int, default=3, help="rounds; best reported, median beside it (default 3)")
    p.add_argument("--bench", default=None, help="ckpt-bench-s3 (default build/ckpt-bench-s3 beside bench/)")
    p.add_argument("--json", metavar="FILE", help="also write the JSON document here")
    args = p.parse_args()
    if not args.url or not args.url.startswith("s3://"):
        p.error("no s3:// --url and no CKPT_S3_TEST_URL (run under tools/s3-test-server.py)")
    args.size = args.size // 4096 * 4096
    args.tensor_size = max(2, args.tensor_size // 2 * 2)
    if args.bench is None:
        args.bench = os.path.join(os.path.dirname(HERE), "build", "ckpt-bench-s3")
    if not os.access(args.bench, os.X_OK):
        p.error(f"{args.bench} is not built (cmake --build build --target ckpt-bench-s3)")

    s3fs, why = import_s3fs()
    dcp = None
    if s3fs is None:
        print(f"bench-s3-dcp: DCP not measured: {why}", file=sys.stderr)
    else:
        try:
            import torch  # noqa: F401
            dcp = Dcp(args, s3fs)
        except ImportError as exc:
            why = f"torch does not import: {exc}"
            print(f"bench-s3-dcp: DCP not measured: {why}", file=sys.stderr)

    runs = {k: [] for k in ("raw_save", "ckpt_save", "raw_load", "ckpt_load_verify", "dcp_save", "dcp_load")}
    machine = None
    load_before = os.getloadavg()[0]
    try:
        for _ in range(args.repeat):
            secs, doc = run_ckpt(args)
            machine = machine or doc
            for k, v in secs.items():
                runs[k].append(v)
            if dcp is not None:
                save_s, load_s = dcp.save_and_load()
                runs["dcp_save"].append(save_s)
                runs["dcp_load"].append(load_s)
    finally:
        if dcp is not None:
            dcp.cleanup()
    load_after = os.getloadavg()[0]

    def gbps(s):
        return args.size / s / 1e9

    rows = []
    labels = [("raw", "raw S3: multipart upload / ranged GETs", "raw_save", "raw_load"),
              ("ckpt", "ckpt Store on objects (load: every chunk verified)", "ckpt_save", "ckpt_load_verify"),
              ("dcp", "DCP FsspecWriter / FsspecReader (s3fs)", "dcp_save", "dcp_load")]
    best = {k: min(v) for k, v in runs.items() if v}
    median = {k: statistics.median(v) for k, v in runs.items() if v}
    for key, label, save, load in labels:
        if save not in best:
            continue
        rows.append({"system": key, "label": label,
                     "save_gb_per_s": gbps(best[save]), "save_median_gb_per_s": gbps(median[save]),
                     "load_gb_per_s": gbps(best[load]), "load_median_gb_per_s": gbps(median[load]),
                     "save_vs_raw": best["raw_save"] / best[save], "load_vs_raw": best["raw_load"] / best[load],
                     "save_runs_s": runs[save], "load_runs_s": runs[load]})
    cpu = machine["cpu"]
    doc = {"tool": "bench-s3-dcp", "url": args.url, "endpoint": os.environ.get("AWS_ENDPOINT_URL", ""),
           "server": os.environ.get("CKPT_S3_TEST_SERVER", ""), "size_bytes": args.size, "connections": args.connections,
           "part_size": args.part_size, "tensor_size": args.tensor_size, "repeat": args.repeat, "statistic": "best",
           "cpu": cpu, "load_average": {"before": load_before, "after": load_after}, "rows": rows,
           "dcp_skipped": None if dcp is not None else why}
    print(f"bench-s3-dcp: {args.size / 2**30:.2f} GiB of BF16 tensors ({args.tensor_size >> 20} MiB each), "
          f"{args.connections} connections, server {doc['endpoint'] or '(AWS)'} {doc['server']}, {args.repeat} rounds alternating")
    print(f"CPU: {cpu['model']}, {cpu['cores_online']} cores online, AVX-512 {'yes' if cpu['avx512f'] else 'no'}; "
          f"load average {load_before:.2f} before, {load_after:.2f} after\n")
    print(f"{'':48} {'save GB/s':>10} {'median':>7} {'load GB/s':>10} {'median':>7} {'save/raw':>9} {'load/raw':>9}")
    for r in rows:
        print(f"{r['label']:48} {r['save_gb_per_s']:10.3f} {r['save_median_gb_per_s']:7.3f} {r['load_gb_per_s']:10.3f} "
              f"{r['load_median_gb_per_s']:7.3f} {r['save_vs_raw']:8.2f}x {r['load_vs_raw']:8.2f}x")
    if dcp is None:
        print(f"\nDCP not measured: {why}")
    print("\nGB/s: 10^9 bytes of tensor data per second, best of the rounds. raw and ckpt: ckpt-bench-s3 --repeat 1 per round;\n"
          "DCP's load is not verified (it keeps no digests); its bytes were compared after each load, untimed.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
