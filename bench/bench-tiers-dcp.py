#!/usr/bin/env python3
"""PyTorch DCP's async_save on the state ckpt-bench-tiers captures: the same bytes per rank (float32
tensors named rank<r>/t<i>, --tensor bytes each), --ranks gloo processes on this machine, each save
into its own directory under --dir. Per save, the slowest rank's time from async_save's call to its
return (what blocks training) and to its future's result (the files written); the first save is
reported apart, as ckpt-bench-tiers reports its first capture. bench/bench-tiers.py runs this; it
prints one JSON document.

usage: bench-tiers-dcp.py --dir DISK_DIR [--ranks 4] [--size 1GiB] [--tensor 16MiB] [--repeat 5]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import time


def tensor_sizes(size, ranks, tensor):
    """The same split as ckpt-bench-tiers: size/ranks rounded down to 4 KiB, cut into tensors."""
    per_rank = size // ranks // 4096 * 4096
    out, done = [], 0
    while done < per_rank:
        n = min(tensor, per_rank - done)
        out.append(n)
        done += n
    return per_rank, out


def worker(rank, args, port):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    per_rank, sizes = tensor_sizes(args.size, args.ranks, args.tensor)
    g = torch.Generator().manual_seed(0x71E25 + rank)
    state = {}
    for i, n in enumerate(sizes):
        bits = torch.randint(-(2**31), 2**31 - 1, (n // 4,), dtype=torch.int32, generator=g)
        state[f"rank{rank}/t{i}"] = bits.view(torch.float32)
    blocked, durable = [], []
    for k in range(args.repeat + 1):
        where = os.path.join(args.dir, f"step-{k}")
        dist.barrier()
        start = time.perf_counter()
        fut = dcp.async_save(state, checkpoint_id=where)
        blocked.append(time.perf_counter() - start)
        fut.result()
        durable.append(time.perf_counter() - start)
        dist.barrier()
        if rank == 0:
            shutil.rmtree(where, ignore_errors=True)
    everyone = [None] * args.ranks
    dist.all_gather_object(everyone, {"blocked": blocked, "durable": durable})
    if rank == 0:
        worst_blocked = [max(r["blocked"][k] for r in everyone) for k in range(args.repeat + 1)]
        worst_durable = [max(r["durable"][k] for r in everyone) for k in range(args.repeat + 1)]
        doc = {
            "system": "torch.distributed.checkpoint.async_save (FileSystemWriter by checkpoint_id, default stager)",
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "ranks": args.ranks,
            "size": args.size,
            "per_rank_bytes": per_rank,
            "tensors_per_rank": len(sizes),
            "saves": args.repeat,
            "unit": "seconds, the slowest rank per save",
            "first_blocked_s": worst_blocked[0],
            "blocked_s": worst_blocked[1:],
            "durable_s": worst_durable[1:],
            "median": {"blocked_s": statistics.median(worst_blocked[1:]), "durable_s": statistics.median(worst_durable[1:])},
            "per_rank": everyone,
        }
        print(json.dumps(doc), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="directory for the saves, on a disk")
    p.add_argument("--ranks", type=int, default=4)
    # Bytes, as bench/bench-tiers.py passes them (it parses "1GiB" and the like once).
    p.add_argument("--size", type=int, default=1 << 30)
    p.add_argument("--tensor", type=int, default=16 << 20)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    if args.size // args.ranks < 4096 or args.tensor <= 0 or args.tensor % 4:
        p.error("--size must give every rank at least 4 KiB; --tensor must be a positive multiple of 4")
    try:
        import torch.multiprocessing as mp
    except ImportError:
        print(json.dumps({"skipped": "torch is not installed"}))
        return 0
    os.makedirs(args.dir, exist_ok=True)
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(args, port), nprocs=args.ranks, join=True, start_method="spawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
