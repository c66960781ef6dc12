"""One rank of a torch.distributed (gloo) job that saves or loads through ckpt's DCP backend.

Run by test_dcp.py: python dcp_worker.py ACTION STORE RANK WORLD INIT_FILE [STEP]. Prints OK on success.
"""

import io
import os
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

from ckpt.torch.dcp import StorageReader, StorageWriter

ROWS, COLS = 12, 10


def full_weight(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(ROWS, COLS, generator=g)


def state_for_save(step, world):
    w = full_weight(step)
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        mesh = init_device_mesh("cpu", (world,))
        w = distribute_tensor(w, mesh, [Shard(0)])
    return {
        "model": {"w": w, "bias": torch.arange(COLS, dtype=torch.bfloat16) + step},
        "optim": {"step": step * 10, "lr": 0.01, "betas": (0.9, 0.99)},
        "extra": io.BytesIO(b"sampler-state-%d" % step),
    }


def state_for_load(world):
    w = torch.zeros(ROWS, COLS)
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        mesh = init_device_mesh("cpu", (world,))
        w = distribute_tensor(w, mesh, [Shard(0)])
    return {"model": {"w": w, "bias": torch.zeros(COLS, dtype=torch.bfloat16)},
            "optim": {"step": 0, "lr": 0.0, "betas": (0.0, 0.0)}, "extra": io.BytesIO()}


class KillingPlanner(DefaultSavePlanner):
    """Kills this process (SIGKILL) while it writes its shard, after its first item."""

    def __init__(self):
        super().__init__()
        self.items = 0

    def resolve_data(self, write_item):
        self.items += 1
        if self.items == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().resolve_data(write_item)


def main():
    action, store, rank, world, init = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    step = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=60))
    if action in ("save", "async", "kill"):
        state = state_for_save(step, world)
        writer = StorageWriter(store, step)
        planner = KillingPlanner() if action == "kill" and rank == world - 1 else None
        if action == "async":
            dcp.async_save(state, storage_writer=writer).result()
        else:
            dcp.save(state, storage_writer=writer, planner=planner)
    elif action == "load":
        state = state_for_load(world)
        dcp.load(state, storage_reader=StorageReader(store, step))
        w = state["model"]["w"]
        if world > 1:
            w = w.full_tensor()
        assert torch.equal(w, full_weight(step)), "weights differ"
        assert torch.equal(state["model"]["bias"], torch.arange(COLS, dtype=torch.bfloat16) + step)
        assert state["optim"]["step"] == step * 10 and state["optim"]["lr"] == 0.01, state["optim"]
        assert tuple(state["optim"]["betas"]) == (0.9, 0.99), state["optim"]
        extra = state["extra"]
        extra.seek(0)
        assert extra.read() == b"sampler-state-%d" % step
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
    # Skips finalization: torch's gloo worker may still be freeing a finished collective's tensors, and dies
    # taking the GIL from a finalizing interpreter (abort after OK; pytorch/pytorch#190489, not ours).
    sys.stdout.flush()
    os._exit(0)
