#!/usr/bin/env python3
"""The tiers benchmark (spec/TIERS.md), in one run on one state: --ranks MPI ranks, one per simulated
node, each node its own memory root under --shm-dir, the persistent store on a disk under --dir.

  1. blocking per capture: TieredCheckpointer::step's stall against a memcpy of the same bytes into a
     pre-faulted buffer (same job), and against PyTorch DCP async_save of the same bytes by --ranks
     gloo processes (bench/bench-tiers-dcp.py);
  2. replication: a rank's shard to its peer's memory, against the communicator's own send/recv of the
     same bytes in the same messages between the same pairs (same job; --transport mpi, or gloo);
  3. a restarted job, from launch to state loaded, split into process start and load: from its own
     memory, from a peer's memory (the last node's memory root deleted), from the persistent store
     (every memory root deleted) as this machine reads it (the files' cached pages dropped first), and
     behind --pace-gbps per node for the persistent store (shared storage at scale);
  4. host memory per rank and per replica.

usage: bench-tiers.py --bench BUILD/ckpt-bench-tiers [--size 1GiB] [--ranks 4] [--repeat 5] [--resumes 5]
                      [--dir DISK_DIR] [--shm-dir /dev/shm] [--pace-gbps 1] [--no-dcp] [--json FILE|-]
Prints the table; --json FILE also writes every figure and raw timing ('-': the JSON instead of the
table). Exit status: 0 measured, 1 a resumed state was not what the scenario says or did not verify,
2 a part failed to run.
"""
import argparse
import importlib.util
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = float(1 << 30)


def parse_size(text):
    t = text.strip().lower()
    for suffix, shift in (("kib", 10), ("mib", 20), ("gib", 30), ("tib", 40), ("kb", 10), ("mb", 20), ("gb", 30),
                          ("k", 10), ("m", 20), ("g", 30), ("t", 40), ("b", 0)):
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * (1 << shift))
    return int(float(t))


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return str(n)


def machine():
    info = {"cores": os.cpu_count(), "platform": platform.platform(), "load_average_at_start": os.getloadavg()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        for line in text.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        info["avx512"] = "avx512f" in text
        info["avx2"] = " avx2" in text
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info["memory_bytes"] = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return info


def _load_host():
    """python/ckpt/_host.py, by path: this script runs without the ckpt package installed."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python", "ckpt", "_host.py")
    spec = importlib.util.spec_from_file_location("ckpt_host", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fs_type(path):
    """The file system a path lives on, from /proc/mounts (longest mount point that prefixes it)."""
    mnt, kind, dev = _load_host().mount_of(path) or ("", "?", "?")
    return {"mount": mnt, "type": kind, "device": dev}


class Failure(Exception):
    pass


def mpirun_command(args):
    cmd = shlex.split(args.mpirun)
    cmd += ["-np", str(args.ranks)]
    try:
        version = subprocess.run(cmd[:1] + ["--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    except OSError as e:
        raise Failure(f"cannot run {cmd[0]}: {e}")
    if "Open MPI" in version or "OpenRTE" in version:
        cmd.append("--oversubscribe")
    return cmd


def mpi_env():
    env = dict(os.environ)
    # More ranks than cores: MPI must yield while it waits, or waiting ranks take the measured ones' CPU.
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    return env


def run_json(cmd, env, what, timeout):
    env = dict(env)
    env["CKPT_BENCH_LAUNCH_NS"] = str(time.time_ns())
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        code = 1 if p.returncode == 1 else 2
        raise Failure(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr[-4000:]}", code)
    start = p.stdout.find("{")
    if start < 0:
        raise Failure(f"{what} printed no JSON: {p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return json.loads(p.stdout[start:])


def drop_cached_pages(root):
    """Evicts the persistent store's files from the page cache, so a load reads the disk (the VM's host
    may still cache them)."""
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def expected_sources(scenario, ranks):
    """What each rank's loaded shard must come from, as Resumed::sources words it."""
    if scenario == "own":
        return ["own memory"] * ranks
    if scenario == "peer":
        return ["own memory"] * (ranks - 1) + ["replica in memory"]
    return ["persistent store"] * ranks


def med(values):
    return statistics.median(values) if values else None


def ratio(a, b):
    return a / b if a and b else None


def fmt(x, spec="{:.3f}"):
    return "-" if x is None else spec.format(x)


def verdict(value, target, at_most):
    if value is None:
        return "n/a"
    ok = value <= target if at_most else value >= target
    return f"{'<=' if at_most else '>='} {target:g} {'ok' if ok else 'MISSED'}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default=os.path.join(os.getcwd(), "build", "ckpt-bench-tiers"), help="the ckpt-bench-tiers binary")
    p.add_argument("--mpirun", default="mpirun", help="the MPI launcher, with any options of its own (default mpirun)")
    p.add_argument("--ranks", type=int, default=4, help="MPI ranks, one per simulated node (default 4)")
    p.add_argument("--size", default="1GiB", help="bytes of state across all ranks (default 1GiB)")
    p.add_argument("--tensor", default="16MiB", help="bytes per tensor (default 16MiB)")
    p.add_argument("--repeat", type=int, default=5, help="timed captures and DCP saves (default 5)")
    p.add_argument("--resumes", type=int, default=5, help="restarted jobs per source (default 5)")
    p.add_argument("--dir", default=None, help="disk directory for the persistent store and DCP's saves (default: beside --bench)")
    p.add_argument("--shm-dir", default="/dev/shm", help="where the nodes' memory roots go (default /dev/shm)")
    p.add_argument("--pace-gbps", type=float, default=1.0,
                   help="per-node read rate of the paced persistent store, GB/s (default 1: Llama 3's 2 TB/s for 16K GPUs, per 8-GPU node)")
    p.add_argument("--no-dcp", action="store_true", help="skip PyTorch DCP (it is skipped anyway without torch)")
    p.add_argument("--json", default=None, help="write every figure to FILE ('-': print the JSON instead of the table)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directories")
    p.add_argument("--transport", choices=("mpi", "gloo"), default="mpi",
                   help="the tiers' communicator and the send/recv baseline's: mpi, or gloo connected through MPI (default mpi)")
    args = p.parse_args()
    if args.ranks < 2 or args.repeat < 1 or args.resumes < 1 or args.pace_gbps <= 0:
        p.error("--ranks >= 2, --repeat >= 1, --resumes >= 1, --pace-gbps > 0")
    size = parse_size(args.size)
    disk = args.dir or os.path.dirname(os.path.abspath(args.bench))
    work = tempfile.mkdtemp(prefix="ckpt-bench-tiers-", dir=disk)
    shm = tempfile.mkdtemp(prefix="ckpt-bench-tiers-", dir=args.shm_dir)
    persistent = os.path.join(work, "persistent")
    mpirun = mpirun_command(args)
    env = mpi_env()
    common = ["--root", shm, "--persistent", persistent, "--size", args.size, "--tensor", args.tensor, "--transport", args.transport, "--json"]
    doc = {"machine": machine(), "memory_tier": dict(fs_type(shm), path=shm), "persistent_store": dict(fs_type(persistent), path=persistent),
           "command": " ".join(shlex.quote(a) for a in sys.argv), "size": size, "ranks": args.ranks, "pace_gbps": args.pace_gbps,
           "transport": args.transport}
    exit_code = 0
    try:
        # Sizes the jobs' time limits: minutes per GiB on a slow shared VM, never less than 10.
        timeout = max(600, int(600 * size / GIB))
        doc["capture"] = run_json(mpirun + [args.bench, "capture"] + common + ["--repeat", str(args.repeat)], env, "capture", timeout)
        doc["dcp"] = {"skipped": "--no-dcp"}
        if not args.no_dcp:
            dcp_cmd = [sys.executable, os.path.join(HERE, "bench-tiers-dcp.py"), "--dir", os.path.join(work, "dcp"), "--ranks",
                       str(args.ranks), "--size", str(size), "--tensor", str(parse_size(args.tensor)), "--repeat", str(args.repeat)]
            try:
                import torch  # noqa: F401  (only whether it is there)
                doc["dcp"] = run_json(dcp_cmd, os.environ, "DCP async_save", timeout)
            except ImportError:
                doc["dcp"] = {"skipped": "torch is not installed"}
        scenarios = [
            ("own", "own memory", None, False),
            ("peer", f"a peer's memory (node n{args.ranks - 1}'s memory root deleted)", "last", False),
            ("persistent", "persistent store, this disk (its cached pages dropped)", "all", False),
            ("paced", f"persistent store paced to {args.pace_gbps:g} GB/s per node", "all", True),
        ]
        doc["resume"] = {}
        for key, label, delete, paced in scenarios:
            runs = []
            for _ in range(args.resumes):
                nodes = sorted(n for n in os.listdir(shm) if n.startswith("node-"))
                if delete == "last":
                    shutil.rmtree(os.path.join(shm, f"node-n{args.ranks - 1}"), ignore_errors=True)
                elif delete == "all":
                    for n in nodes:
                        shutil.rmtree(os.path.join(shm, n), ignore_errors=True)
                    drop_cached_pages(persistent)
                extra = ["--pace-gbps", str(args.pace_gbps)] if paced else []
                r = run_json(mpirun + [args.bench, "resume"] + common + extra, env, f"resume from {key}", timeout)
                words = [" ".join(s) for s in r["sources"]]
                want = expected_sources("persistent" if key == "paced" else key, args.ranks)
                r["as_expected"] = all(w in got for w, got in zip(want, words)) and len(words) == len(want)
                if not r["as_expected"]:
                    exit_code = 1
                runs.append(r)
            fields = ("spawn_s", "mpi_init_s", "model_alloc_s", "create_s", "start_s", "load_s", "to_view_s", "read_max_s", "to_loaded_s", "after_load_s")
            doc["resume"][key] = {"label": label, "runs": runs, "median": {f: med([r[f] for r in runs]) for f in fields},
                                  "as_expected": all(r["as_expected"] for r in runs), "step": runs[0]["step"]}
    except Failure as e:
        print(f"bench-tiers: {e.args[0]}", file=sys.stderr)
        return e.args[1] if len(e.args) > 1 else 2
    except subprocess.TimeoutExpired as e:
        print(f"bench-tiers: timed out: {e.cmd}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(shm, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)

    doc["machine"]["load_average_at_end"] = os.getloadavg()
    doc["figures"] = figures(doc)
    if args.json and args.json != "-":
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    if args.json == "-":
        print(json.dumps(doc, indent=1))
    else:
        print(table(doc))
    for key, r in doc["resume"].items():
        if not r["as_expected"]:
            print(f"bench-tiers: resume from {key}: the shards did not come from where the scenario says: {r['runs'][-1]['sources']}",
                  file=sys.stderr)
    return exit_code


def figures(doc):
    """The headline ratios, each with its target where the issue sets one."""
    c = doc["capture"]["median"]
    per_rank = doc["capture"]["per_rank_bytes"]
    dcp = doc["dcp"].get("median", {}).get("blocked_s")
    load = {k: r["median"]["load_s"] for k, r in doc["resume"].items()}
    return {
        "stall_vs_staging_copy": ratio(c["stall_s"], c["staging_copy_s"]),
        "stall_vs_small_page_copy": ratio(c["stall_s"], c["staging_copy_small_pages_s"]),
        "stall_vs_dcp_async_save": ratio(c["stall_s"], dcp),
        "replication_vs_p2p_rate": ratio(c["raw_p2p_s"], c["replication_s"]),
        "replication_vs_p2p_write_rate": ratio(c["raw_p2p_write_s"], c["replication_s"]),
        "persistent_vs_memory_load": ratio(load["persistent"], load["own"]),
        "paced_persistent_vs_memory_load": ratio(load["paced"], load["own"]),
        "peer_vs_own_memory_load": ratio(load["peer"], load["own"]),
        # The "load from own memory <= 1.5x a memcpy of the rank's state": the staging copy, as every rank
        # copies its state at once (the load runs on every rank at once too).
        "own_memory_load_vs_copy": ratio(load["own"], c["staging_copy_s"]),
        "replication_gibs_per_rank": per_rank / c["replication_s"] / GIB,
        "p2p_gibs_per_rank": per_rank / c["raw_p2p_s"] / GIB,
        "pace_floor_s": per_rank / (doc["pace_gbps"] * 1e9),
        "targets": {"stall_vs_staging_copy": "<= 1.1", "replication_vs_p2p_rate": ">= 0.8",
                    "persistent_vs_memory_load": ">= 5 (peers report 7-13x)", "own_memory_load_vs_copy": "<= 1.5"},
    }


def table(doc):
    m, c, d, res, f = doc["machine"], doc["capture"], doc["dcp"], doc["resume"], doc["figures"]
    mc = c["median"]
    per_rank = c["per_rank_bytes"]
    gibs = lambda s: per_rank / s / GIB if s else 0.0  # noqa: E731
    out = []

    def row(name, seconds, note=""):
        out.append(f"  {name:<58}{seconds:8.3f}{gibs(seconds):8.2f}   {note}".rstrip())

    out.append(f"ckpt tiers: {human(doc['size'])} of state across {doc['ranks']} ranks, one per simulated node "
               f"({human(per_rank)} per rank, {c['tensors_per_rank']} float32 tensors of up to {human(c['tensor_bytes'])})")
    out.append(f"machine: {m.get('cores')} cores ({m.get('cpu', '?')}), AVX-512 {'yes' if m.get('avx512') else 'no'}, "
               f"{human(m.get('memory_bytes', 0))} RAM, shared by all {doc['ranks']} simulated nodes; memory roots on "
               f"{doc['memory_tier']['type']} ({doc['memory_tier']['mount']}), persistent store on {doc['persistent_store']['type']} "
               f"({doc['persistent_store']['device']})")
    out.append(f"medians of {c['captures']} captures and {len(res['own']['runs'])} restarts per source; per capture the slowest "
               f"rank's time, or first start to last finish for collective work")
    out.append("")
    out.append(f"  {'1. blocking per capture':<58}{'seconds':>8}{'GiB/s':>8}   vs limit (target)")
    row("staging copy: memcpy into pre-faulted memory (huge pages)", mc["staging_copy_s"])
    row("  the same into 4 KiB pages, as a tmpfs file's mapping has", mc["staging_copy_small_pages_s"])
    if "copy_hashed_s" in mc:
        row("  the same hashing each 256 KiB as it lands (a fused capture)", mc["copy_hashed_s"],
            f"{ratio(mc['copy_hashed_s'], mc['staging_copy_s']):.2f}x the copy: why the worker hashes instead (spec/TIERS.md 2.1)")
    row("TieredCheckpointer::step(), the caller blocked", mc["stall_s"],
        f"time {f['stall_vs_staging_copy']:.2f}x staging copy ({verdict(f['stall_vs_staging_copy'], 1.1, True)}); "
        f"{f['stall_vs_small_page_copy']:.2f}x the 4 KiB-page copy")
    if "stall_minor_faults" in mc:
        out.append(f"    of which in the kernel (the training thread, most of any rank): {mc['stall_minor_faults']:.0f} minor page "
                   f"faults, {mc['stall_sys_s']:.4f} s system CPU")
    if "stall_cpu_s" in mc:
        out.append(f"    the slowest rank's training thread: {mc['stall_cpu_s']:.3f} s on a core, {mc['stall_waiting_s']:.3f} s waiting for one "
                   f"(its plain copy: {mc['staging_copy_cpu_s']:.3f} s and {mc['staging_copy_waiting_s']:.3f} s); "
                   f"{doc['ranks']} ranks and their workers share {m.get('cores')} cores")
    if "median" in d:
        row(f"DCP async_save, {d['ranks']} gloo processes, until it returns", d["median"]["blocked_s"],
            f"ckpt's stall is {f['stall_vs_dcp_async_save']:.2f}x DCP's")
    else:
        out.append(f"  DCP async_save: skipped ({d.get('skipped')})")
    out.append(f"  first capture (allocates and pre-faults its memory-tier file): {c['first_capture_stall_s']:.3f} s"
               + (f"; DCP's first async_save {d['first_blocked_s']:.3f} s" if "first_blocked_s" in d else ""))
    out.append("")
    out.append(f"  {'2. replication per capture: each rank its shard to its peer':<58}{'seconds':>8}{'GiB/s':>8}   per rank")
    row(f"{doc.get('transport', 'mpi')} send/recv, {human(c['transfer_block'])} messages, the same pairs", mc["raw_p2p_s"])
    row("  the same, the receiver writing each message to its root", mc["raw_p2p_write_s"])
    row("  pwrite of the same bytes into the memory root, alone", mc["memory_write_s"])
    row("replication: 'replicating' phase until wait() returns", mc["replication_s"],
        f"rate {f['replication_vs_p2p_rate']:.2f}x send/recv ({verdict(f['replication_vs_p2p_rate'], 0.8, False)}); "
        f"{f['replication_vs_p2p_write_rate']:.2f}x send/recv+write")
    out.append(f"  step() return to 'captured' (commit to the rank's own memory store): {mc['commit_s']:.3f} s; "
               f"CPU from step() return to wait(), all ranks: user {mc['background_user_s']:.2f} s, sys {mc['background_sys_s']:.2f} s")
    fs = mc.get("background_fs_s", {})
    out.append("  of that, in file-system calls (all ranks): " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(fs.items()) if v >= 0.005))
    out.append(f"  promotion of the last capture to the persistent store ('promoting' to wait()): {c['promotion_s']:.3f} s")
    out.append("")
    out.append(f"  {'3. a restarted job, launch to state loaded (slowest rank)':<58}{'start':>8}{'load':>8}{'total':>8}"
               f"   load vs own memory; load CPU user+sys (all ranks)")
    for key in ("own", "peer", "persistent", "paced"):
        r = res[key]["median"]
        runs = res[key]["runs"]
        cpu_u = med([x["load_user_s"] for x in runs])
        cpu_s = med([x["load_sys_s"] for x in runs])
        lr = ratio(r["load_s"], res["own"]["median"]["load_s"])
        flag = "" if res[key]["as_expected"] else "  (shards NOT from where the scenario says)"
        out.append(f"  {res[key]['label']:<58}{r['start_s']:8.3f}{r['load_s']:8.3f}{r['to_loaded_s']:8.3f}   "
                   f"{fmt(lr, '{:.2f}x')}; {cpu_u:.2f} + {cpu_s:.2f} s{flag}")
    o = res["own"]["median"]
    out.append(f"  load from own memory: {fmt(f['own_memory_load_vs_copy'], '{:.2f}x')} the staging copy of the same bytes, every rank at once "
               f"({verdict(f['own_memory_load_vs_copy'], 1.5, True)}): each chunk hashed as it is copied (spec/TIERS.md 7.2); "
               f"of its {o['load_s']:.3f} s, {o['to_view_s']:.3f} s agreeing on the step, {o['read_max_s']:.3f} s the slowest rank's read")
    out.append(f"  start: mpirun spawn {o['spawn_s']:.3f} + MPI_Init {o['mpi_init_s']:.3f} + the model's memory {o['model_alloc_s']:.3f} "
               f"+ create {o['create_s']:.3f} s (own-memory restarts); load: resume() until every rank's tensors are read and checked")
    out.append(f"  resume() returns later still, after recording and refilling lost copies: +{res['peer']['median']['after_load_s']:.3f} s "
               f"from a peer, +{res['persistent']['median']['after_load_s']:.3f} s from the persistent store")
    out.append(f"  persistent/memory load: {fmt(f['persistent_vs_memory_load'], '{:.2f}x')} as this machine reads its disk "
               f"({verdict(f['persistent_vs_memory_load'], 5, False)}); {fmt(f['paced_persistent_vs_memory_load'], '{:.2f}x')} "
               f"with reads paced to {doc['pace_gbps']:g} GB/s per node ({verdict(f['paced_persistent_vs_memory_load'], 5, False)}); "
               f"the link alone takes {f['pace_floor_s']:.3f} s for {human(per_rank)}")
    out.append("")
    out.append("  4. host memory per rank (rank 0; every rank alike)")
    m0 = c["memory"][0]
    per_replica = m0["held_bytes"] / max(1, m0["held_shards"] * m0["steps_kept"])
    out.append(f"  memory root {human(m0['memory_root_bytes'])}: own store {human(m0['own_store_bytes'])} ({m0['steps_kept']} steps) "
               f"+ replicas {human(m0['held_bytes'])} ({m0['held_shards']} shard x {m0['steps_kept']} steps, {human(per_replica)} "
               f"per replica per step; shard file {human(m0['own_shard_file_bytes'])})")
    out.append(f"  the process's own memory (anonymous: a staging pool; the memory root's files it maps are counted above) grew "
               f"{human(m0['rss_growth_first_capture'])} across the first capture; peak resident {human(m0['rss_peak'])}, "
               f"of which the benchmark's own state and copy buffers {human(m0['state_and_copy_buffers'])}")
    out.append(f"  the tiers hold {(m0['memory_root_bytes'] + m0['rss_growth_first_capture']) / per_rank:.3f}x the rank's "
               f"{human(per_rank)} of state in host memory (memory root + the process's own growth; "
               f"{verdict((m0['memory_root_bytes'] + m0['rss_growth_first_capture']) / per_rank, 4, True)})")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
