"""Side-by-side benchmark: ckpt against safetensors, torch.save and PyTorch DCP on the same state, in
one run, alternating the systems round by round (spec/PYTHON.md 5, docs/performance.md).

    python -m ckpt.bench --dir /tmp --sizes 1GiB,4GiB --mixes uniform,model --rounds 3 \\
        [--cpp-bench build/ckpt-bench] [--json out.json] [--plot out.png]

Every save is durable before its clock stops: safetensors and torch.save are followed by fsync of the
file and its directory; DCP's FileSystemWriter fsyncs its files (sync_files=True); ckpt's saves are
durable by construction. Before each load the page cache of the files just written is dropped
(posix_fadvise DONTNEED after the fsync), so loads read from the device, and every load touches every
page of every tensor it returns. ckpt's loads verify every chunk digest; no peer verifies anything.
Async rows report the time the call blocks the caller and the time until the step is durable.
The machine's own limits are measured in the same rounds: write+fsync of the same bytes with os.write,
and a cold read of them into memory. Reported: the median of the rounds (min beside it). The C++ rows
(--cpp-bench) are one run of `ckpt-bench --only async` on its own state of 32 MiB tensors, uniform
mix only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

MiB = 1 << 20


def parse_size(text: str) -> int:
    units = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": MiB, "mib": MiB, "g": 1 << 30, "gib": 1 << 30}
    t = text.strip().lower()
    digits = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(digits):]
    if not digits or unit not in units:
        raise argparse.ArgumentTypeError(f"not a size: {text}")
    return int(float(digits) * units[unit])


# --- The state ----------------------------------------------------------------------------------------

def make_state(torch, size: int, mix: str, seed: int = 0):
    """`uniform`: tensors of 32 MiB. `model`: a transformer-like mix: per block four matrices of
    1-16 MiB, two norms of 4 KiB and a bias of 64 KiB, in float32 and bfloat16."""
    g = torch.Generator().manual_seed(seed)
    state, total, i = {}, 0, 0
    rng = np.random.default_rng(seed)
    while total < size:
        if mix == "uniform":
            n = min(32 * MiB, size - total)
            state[f"layer{i}.weight"] = torch.randn(n // 4, generator=g)
            total += (n // 4) * 4
        elif mix == "model":
            for kind, nbytes, dtype in (("attn.qkv", int(rng.integers(1, 17)) * MiB, torch.bfloat16),
                                        ("attn.out", int(rng.integers(1, 9)) * MiB, torch.bfloat16),
                                        ("mlp.up", int(rng.integers(2, 17)) * MiB, torch.float32),
                                        ("mlp.down", int(rng.integers(2, 17)) * MiB, torch.float32),
                                        ("norm1", 4096, torch.float32), ("norm2", 4096, torch.float32),
                                        ("bias", 64 << 10, torch.float32)):
                nbytes = min(nbytes, max(size - total, 4096))
                elem = torch.empty((), dtype=dtype).element_size()
                n = max(nbytes // elem, 1)
                state[f"blocks.{i}.{kind}"] = torch.randn(n, generator=g).to(dtype)
                total += n * elem
                if total >= size:
                    break
        else:
            raise ValueError(f"unknown mix {mix!r}")
        i += 1
    return state, total


def touch(tensors) -> int:
    """Reads one byte of every page of every tensor: the load really brought the data in."""
    acc = 0
    for t in tensors.values():
        if hasattr(t, "numpy"):
            flat = t.detach().reshape(-1)
            if flat.numel() == 0:
                continue
            import torch

            a = flat.view(torch.uint8).numpy()
        else:
            a = t.reshape(-1).view(np.uint8)
        acc += int(a[::4096].sum())
    return acc


def drop_cache(path: str) -> None:
    """Drops the (clean, synced) page cache of every file under path."""
    paths = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def fsync_path(path: str) -> None:
    """fsync of a file or a directory by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file_and_dir(path: str) -> None:
    fsync_path(path)
    fsync_path(os.path.dirname(path) or ".")


def timed_save(write, where, fsync=True):
    """(blocked, durable) seconds of a synchronous save: write(), then, for a system that is not durable
    by construction, fsync of the file and its directory."""
    start = time.perf_counter()
    write()
    if fsync:
        fsync_file_and_dir(where)
    d = time.perf_counter() - start
    return d, d


def timed_load(read):
    """Seconds of read() and of touching every page of the tensors it returns."""
    start = time.perf_counter()
    touch(read())
    return time.perf_counter() - start


# --- The systems --------------------------------------------------------------------------------------
# Each: save(state, where) -> (blocked_s, durable_s); load(where) -> (seconds). `where` is a fresh path.

class Raw:
    name, verifies, kind = "raw write+fsync / read (limit)", False, "limit"

    def save(self, torch, state, where):
        def write():
            fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for t in state.values():
                    os.write(fd, memoryview(t.reshape(-1).view(torch.uint8).numpy()))
                os.fsync(fd)
            finally:
                os.close(fd)

        return timed_save(write, where)

    def load(self, torch, state, where):
        def read():
            buf = np.empty(os.path.getsize(where), np.uint8)
            with open(where, "rb", buffering=0) as f:
                f.readinto(memoryview(buf))
            return {"all": buf}

        return timed_load(read)


class Safetensors:
    name, verifies, kind = "safetensors save_file / load_file", False, "peer"

    def save(self, torch, state, where):
        import safetensors.torch

        return timed_save(lambda: safetensors.torch.save_file(state, where), where)

    def load(self, torch, state, where):
        import safetensors.torch

        return timed_load(lambda: safetensors.torch.load_file(where))


class TorchSave:
    name, verifies, kind = "torch.save / torch.load", False, "peer"

    def save(self, torch, state, where):
        return timed_save(lambda: torch.save(state, where), where)

    def load(self, torch, state, where):
        return timed_load(lambda: torch.load(where, weights_only=True))


def _dcp_save(dcp, state, writer, asynchronous):
    """(blocked, durable) seconds of dcp.save, or of dcp.async_save and its result()."""
    start = time.perf_counter()
    if asynchronous:
        fut = dcp.async_save(state, storage_writer=writer)
        blocked = time.perf_counter() - start
        fut.result()
        return blocked, time.perf_counter() - start
    dcp.save(state, storage_writer=writer)
    durable = time.perf_counter() - start
    return durable, durable


def _dcp_load(dcp, torch, state, reader):
    """Seconds of dcp.load into fresh tensors of the state's shapes from the storage reader that reader() makes."""
    target = {k: torch.empty_like(v) for k, v in state.items()}

    def read():
        dcp.load(target, storage_reader=reader())
        return target

    return timed_load(read)


class DcpFs:
    name, verifies, kind = "DCP FileSystemWriter", False, "peer"
    asynchronous = False

    def save(self, torch, state, where):
        import torch.distributed.checkpoint as dcp

        return _dcp_save(dcp, state, dcp.FileSystemWriter(where, sync_files=True), self.asynchronous)

    def load(self, torch, state, where):
        import torch.distributed.checkpoint as dcp

        return _dcp_load(dcp, torch, state, lambda: dcp.FileSystemReader(where))


class AsyncRow:
    """A system's asynchronous row, put before the system among the bases: its saves are asynchronous,
    and it loads nothing (the synchronous row loads the same files)."""

    asynchronous = True

    def load(self, torch, state, where):
        return None


class DcpFsAsync(AsyncRow, DcpFs):
    name = "DCP FileSystemWriter async_save"


class DcpCkpt(DcpFs):
    name, verifies, kind = "DCP on the ckpt backend", True, "ckpt"

    def save(self, torch, state, where):
        import torch.distributed.checkpoint as dcp

        from ckpt.torch.dcp import StorageWriter

        writer = StorageWriter(where, step=1)
        try:
            return _dcp_save(dcp, state, writer, self.asynchronous)
        finally:
            writer.close()

    def load(self, torch, state, where):
        import torch.distributed.checkpoint as dcp

        from ckpt.torch.dcp import StorageReader

        return _dcp_load(dcp, torch, state, lambda: StorageReader(where))


class DcpCkptAsync(AsyncRow, DcpCkpt):
    name = "DCP on the ckpt backend async_save"


class CkptFile:
    name, verifies, kind = "ckpt.torch save_file / load_file", True, "ckpt"

    def save(self, torch, state, where):
        import ckpt.torch

        return timed_save(lambda: ckpt.torch.save_file(state, where), where, fsync=False)  # durable by construction

    def load(self, torch, state, where):
        import ckpt.torch

        return timed_load(lambda: ckpt.torch.load_file(where))


class CkptStore:
    name, verifies, kind = "ckpt.Store save / load (Python)", True, "ckpt"
    asynchronous = False

    def save(self, torch, state, where):
        import ckpt

        store = ckpt.Store(where)
        if self.asynchronous:  # the staging pool is made once, before training starts, not per save
            store.prepare_async(sum(t.numel() * t.element_size() for t in state.values()))
        start = time.perf_counter()
        if self.asynchronous:
            store.save_async(1, state)
            blocked = time.perf_counter() - start
            store.wait()
        else:
            store.save(1, state)
            blocked = None
        durable = time.perf_counter() - start
        store.close()
        return (durable if blocked is None else blocked), durable

    def load(self, torch, state, where):
        import ckpt

        def read():
            with ckpt.Store(where, read_only=True) as store:
                return store.load(framework="torch")[0]

        return timed_load(read)


class CkptStoreAsync(AsyncRow, CkptStore):
    name = "ckpt.Store save_async (Python)"


class CkptCpp:
    """The C++ library without Python: ckpt-bench's store commit and AsyncSaver rows, same shape."""

    name, verifies, kind = "ckpt C++ Store commit (ckpt-bench)", True, "ckpt"

    def __init__(self, bench, tensor_size):
        self.bench, self.tensor_size = bench, tensor_size

    def save(self, torch, state, where):
        size = sum(t.numel() * t.element_size() for t in state.values())
        os.makedirs(where, exist_ok=True)
        out = subprocess.run([self.bench, "--only", "async", "--size", str(size), "--tensor-size", str(self.tensor_size),
                              "--dir", where, "--repeat", "1", "--json"], check=True, capture_output=True, text=True)
        doc = json.loads(out.stdout)
        rows = {r["id"]: r["best_s"] for r in doc["ckpt"] + doc["limits"]}
        self.async_row = (rows["async_stall"], rows["async_total"])
        return rows["store_commit"], rows["store_commit"]

    def load(self, torch, state, where):
        return None


def systems(args, mix):
    out = [Raw(), Safetensors(), TorchSave(), DcpFs(), DcpFsAsync(), CkptFile(), CkptStore(), CkptStoreAsync(), DcpCkpt(),
           DcpCkptAsync()]
    if args.cpp_bench and mix == "uniform":  # ckpt-bench makes its own state: 32 MiB tensors, the uniform mix
        out.append(CkptCpp(args.cpp_bench, 32 * MiB))
    return out


# --- The run ------------------------------------------------------------------------------------------

def run(args):
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    results = []
    scratch = tempfile.mkdtemp(prefix="ckpt-bench-py-", dir=args.dir)
    try:
        for size in args.sizes:
            for mix in args.mixes:
                state, total = make_state(torch, size, mix)
                sys_list = systems(args, mix)
                rows = {s.name: {"save": [], "durable": [], "load": []} for s in sys_list}
                if any(s.name.startswith("ckpt C++") for s in sys_list):
                    rows["ckpt C++ AsyncSaver (ckpt-bench)"] = {"save": [], "durable": [], "load": []}
                warm = os.path.join(scratch, "warm")  # DCP's first call imports and plans
                import torch.distributed.checkpoint as dcp

                dcp.save({"x": torch.ones(4)}, storage_writer=dcp.FileSystemWriter(warm))
                shutil.rmtree(warm, ignore_errors=True)
                for r in range(args.rounds):
                    order = sys_list[r % len(sys_list):] + sys_list[:r % len(sys_list)]  # alternate who goes first
                    for s in order:
                        if isinstance(s, CkptCpp) and r > 0:
                            continue  # one ckpt-bench run (it measures several rows, each at the full size)
                        began = time.perf_counter()
                        where = os.path.join(scratch, f"r{r}-{type(s).__name__}")
                        blocked, durable = s.save(torch, state, where)
                        rows[s.name]["save"].append(blocked)
                        rows[s.name]["durable"].append(durable)
                        if isinstance(s, CkptCpp):
                            a = rows["ckpt C++ AsyncSaver (ckpt-bench)"]
                            a["save"].append(s.async_row[0])
                            a["durable"].append(s.async_row[1])
                        if os.path.exists(where):
                            drop_cache(where)
                        t = s.load(torch, state, where)
                        if t is not None:
                            rows[s.name]["load"].append(t)
                        if os.path.isdir(where):
                            shutil.rmtree(where, ignore_errors=True)
                        elif os.path.exists(where):
                            os.unlink(where)
                        if args.verbose:
                            print(f"    {s.name}: {time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
                    print(f"  {total / (1 << 30):.2f} GiB {mix}: round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
                kinds = {s.name: (s.kind, s.verifies) for s in sys_list}
                kinds["ckpt C++ AsyncSaver (ckpt-bench)"] = ("ckpt", True)
                for name, v in rows.items():
                    if not v["save"]:
                        continue
                    kind, verifies = kinds[name]
                    results.append({
                        "size_bytes": total, "mix": mix, "tensors": len(state), "system": name, "kind": kind,
                        "verifies": verifies, "asynchronous": "async" in name.lower() or "AsyncSaver" in name,
                        "blocked_s": statistics.median(v["save"]), "blocked_min_s": min(v["save"]),
                        "durable_s": statistics.median(v["durable"]), "durable_min_s": min(v["durable"]),
                        "load_s": statistics.median(v["load"]) if v["load"] else None,
                        "load_min_s": min(v["load"]) if v["load"] else None,
                    })
                del state
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def verdicts(results):
    """The issue's targets, per size and mix: ckpt's durable save within 1.05x of the fastest durable
    peer; ckpt's verified load no slower than the fastest peer's load; ckpt's async stall below DCP
    async_save's."""
    out = []
    groups = sorted({(r["size_bytes"], r["mix"]) for r in results})
    for g in groups:
        rows = [r for r in results if (r["size_bytes"], r["mix"]) == g]
        peers = [r for r in rows if r["kind"] == "peer"]
        ours = [r for r in rows if r["kind"] == "ckpt"]
        sync_peer = min(r["durable_s"] for r in peers if not r["asynchronous"])
        sync_ours = min(r["durable_s"] for r in ours if not r["asynchronous"])
        load_peer = min(r["load_s"] for r in peers if r["load_s"] is not None)
        load_ours = min(r["load_s"] for r in ours if r["load_s"] is not None)
        dcp_async = [r["blocked_s"] for r in peers if r["asynchronous"]]
        ours_async = [r["blocked_s"] for r in ours if r["asynchronous"]]
        out.append({
            "size_bytes": g[0], "mix": g[1],
            "save_vs_fastest_peer": sync_ours / sync_peer, "save_target": 1.05,
            "load_vs_fastest_peer": load_ours / load_peer, "load_target": 1.0,
            "async_blocked_vs_dcp": (min(ours_async) / min(dcp_async)) if dcp_async and ours_async else None,
            "async_target": 1.0,
        })
    return out


def table(results, verdict_rows) -> str:
    lines = []
    for size, mix in sorted({(r["size_bytes"], r["mix"]) for r in results}):
        rows = [r for r in results if (r["size_bytes"], r["mix"]) == (size, mix)]
        limit = next((r for r in rows if r["kind"] == "limit"), None)
        lines.append(f"\n{size / (1 << 30):.2f} GiB, mix {mix} ({rows[0]['tensors']} tensors); seconds, median (min)")
        lines.append(f"| system | verifies | blocks | durable | x raw write | load | x raw read |")
        lines.append("|---|---|---|---|---|---|---|")
        for r in rows:
            xw = f"{r['durable_s'] / limit['durable_s']:.2f}" if limit else ""
            load = f"{r['load_s']:.3f} ({r['load_min_s']:.3f})" if r["load_s"] is not None else ""
            xr = f"{r['load_s'] / limit['load_s']:.2f}" if limit and r["load_s"] is not None else ""
            lines.append(f"| {r['system']} | {'yes' if r['verifies'] else 'no'} | {r['blocked_s']:.3f} | "
                         f"{r['durable_s']:.3f} ({r['durable_min_s']:.3f}) | {xw} | {load} | {xr} |")
        v = next(v for v in verdict_rows if (v["size_bytes"], v["mix"]) == (size, mix))
        ok = lambda x, t: "met" if x is not None and x <= t else "MISSED"  # noqa: E731
        lines.append(f"save: fastest ckpt / fastest durable peer = {v['save_vs_fastest_peer']:.3f} (target <= 1.05, "
                     f"{ok(v['save_vs_fastest_peer'], 1.05)}); load: {v['load_vs_fastest_peer']:.3f} (target <= 1.0, "
                     f"{ok(v['load_vs_fastest_peer'], 1.0)})" +
                     (f"; async blocks {v['async_blocked_vs_dcp']:.3f}x of DCP async_save (target < 1, "
                      f"{ok(v['async_blocked_vs_dcp'], 0.9999)})" if v["async_blocked_vs_dcp"] is not None else ""))
    return "\n".join(lines)


def plot(results, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["size_bytes"], r["mix"]) for r in results})
    fig, axes = plt.subplots(len(groups), 2, figsize=(14, 3.2 * len(groups) + 1), squeeze=False)
    for gi, g in enumerate(groups):
        rows = [r for r in results if (r["size_bytes"], r["mix"]) == g]
        names = [r["system"] for r in rows]
        colors = ["#888888" if r["kind"] == "limit" else ("#1f77b4" if r["kind"] == "ckpt" else "#ff7f0e") for r in rows]
        ax = axes[gi][0]
        y = np.arange(len(rows))
        ax.barh(y, [r["durable_s"] for r in rows], color=colors, alpha=0.45, label="until durable")
        ax.barh(y, [r["blocked_s"] for r in rows], color=colors, label="caller blocked")
        ax.set_yticks(y, names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("save, seconds")
        ax.set_title(f"{g[0] / (1 << 30):.2f} GiB, {g[1]}: save", fontsize=9)
        ax = axes[gi][1]
        lrows = [r for r in rows if r["load_s"] is not None]
        y = np.arange(len(lrows))
        ax.barh(y, [r["load_s"] for r in lrows],
                color=["#888888" if r["kind"] == "limit" else ("#1f77b4" if r["kind"] == "ckpt" else "#ff7f0e") for r in lrows])
        ax.set_yticks(y, [r["system"] + (" (verified)" if r["verifies"] else "") for r in lrows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("cold load touching every page, seconds")
        ax.set_title(f"{g[0] / (1 << 30):.2f} GiB, {g[1]}: load", fontsize=9)
    fig.suptitle("ckpt (blue) against peers (orange) and this machine's raw I/O (grey), same state, one run; "
                 "save: dark = caller blocked, light = until durable", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ckpt.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="directory on the file system to measure")
    ap.add_argument("--sizes", default="1GiB,4GiB", help="state sizes, comma-separated")
    ap.add_argument("--mixes", default="uniform,model", help="tensor-size mixes: uniform (32 MiB tensors), model")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpp-bench", default=None, help="the ckpt-bench program, for the C++ rows")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--verbose", action="store_true", help="say how long each system's round took")
    ap.add_argument("--plot", default=None, help="write a PNG plot here (matplotlib)")
    args = ap.parse_args(argv)
    args.sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    args.mixes = [m for m in args.mixes.split(",") if m]
    try:
        import safetensors  # noqa: F401
        import torch
    except ImportError as e:
        print(f"ckpt.bench: needs torch and safetensors ({e})", file=sys.stderr)
        return 2
    results = run(args)
    v = verdicts(results)
    meta = {"python": platform.python_version(), "torch": torch.__version__, "machine": platform.machine(),
            "cpus": os.cpu_count(), "cpu": cpu_model(), "avx512": has_avx512(), "dir": args.dir, "rounds": args.rounds}
    print(f"{meta['cpu']} ({meta['cpus']} CPUs, AVX-512: {'yes' if meta['avx512'] else 'no'}), torch {meta['torch']}, "
          f"{args.rounds} rounds, files in {args.dir}")
    print(table(results, v))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results, "verdicts": v}, f, indent=2)
    if args.plot:
        plot(results, args.plot)
    return 0


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def has_avx512() -> bool:
    try:
        return "avx512f" in open("/proc/cpuinfo").read()
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
