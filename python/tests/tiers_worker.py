"""One rank of a data-parallel torch.distributed (gloo) training job on ckpt's tiers, and the launcher
test_tiers.py starts jobs with.

    python tiers_worker.py WORLD ROOT OUT_DIR STEPS [KILL_STEP KILL_RANK]     # the launcher
    torchrun --nproc-per-node 4 tiers_worker.py - ROOT OUT_DIR STEPS           # the same job under torchrun

The launcher does what torchrun's agent does for a job of WORLD workers on one machine: starts them
as new processes (forked once torch and the package are imported, so 4 workers on 2 cores do not each
pay for the imports), with RANK, WORLD_SIZE and LOCAL_RANK in their environment, and tears the job
down (SIGKILL) as soon as one of them fails. It prints one JSON line: every rank's exit status.

Every rank is its own node (node-n<rank>, its memory root ROOT/node-n<rank>); the persistent store is
ROOT/persistent, or the URL in CKPT_TIERS_PERSISTENT (an s3:// store, spec/TIERS.md 4.5). Memory every 2 steps, persistent every 4, one replica on the next node around the
ring. A worker resumes whatever the tiers agree on, trains to STEPS (steps 0..STEPS-1; the state saved
at step s is the one after training step s), and writes OUT_DIR/rank-<r>.pt: the final model,
optimizer and scheduler state, the RNG states, the data order it consumed and what it resumed from.
With KILL_STEP, rank KILL_RANK SIGKILLs itself at the start of that step, once its captures in flight
are done.
"""

import json
import os
import random
import signal
import sys
import tempfile
import traceback
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from ckpt.torch import TieredCheckpointer

SAMPLES, FEATURES, OUTPUTS, BATCH = 64, 16, 4, 4


class SeededSampler:
    """Each epoch a permutation seeded by the epoch; rank r takes every W-th index. Stateful: epoch and offset."""

    def __init__(self, rank, world):
        self.rank, self.world = rank, world
        self.epoch, self.offset = 0, 0

    def _order(self):
        g = torch.Generator().manual_seed(1000 + self.epoch)
        return torch.randperm(SAMPLES, generator=g)[self.rank::self.world].tolist()

    def next_batch(self):
        order = self._order()
        if self.offset >= len(order):
            self.epoch, self.offset = self.epoch + 1, 0
            order = self._order()
        batch = order[self.offset:self.offset + BATCH]
        self.offset += BATCH
        return batch

    def state_dict(self):
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state):
        self.epoch, self.offset = state["epoch"], state["offset"]


def average_gradients(model, world):
    """Data parallel as DDP does it, in one flat all-reduce (DDP itself imports far more than this test needs)."""
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def worker(root, out_dir, steps, kill_step=-1, kill_rank=-1, init="env://"):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world, timeout=timedelta(seconds=60))

    torch.manual_seed(0)  # the same initial model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, OUTPUTS))
    data = torch.randn(SAMPLES, FEATURES, generator=torch.Generator().manual_seed(7))
    target = torch.randn(SAMPLES, OUTPUTS, generator=torch.Generator().manual_seed(8))
    # Each rank's RNGs its own: dropout and the noise below use them, so only restored RNGs resume identically.
    torch.manual_seed(100 + rank)
    np.random.seed(200 + rank)
    random.seed(300 + rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    sampler = SeededSampler(rank, world)

    tiers = TieredCheckpointer(model, optimizer, scheduler, data=sampler, memory_root=os.path.join(root, f"node-n{rank}"),
                               persistent=os.environ.get("CKPT_TIERS_PERSISTENT") or os.path.join(root, "persistent"), memory_every=2, persist_every=4, replicas=1,
                               memory_keep=2, topology=[f"n{r}" for r in range(world)], chunk_size_log2=12,
                               when_busy="wait")  # every capture taken: the test knows which steps each tier holds
    start = tiers.resume()
    order = {}
    for step in range(start, steps):
        if rank == kill_rank and step == kill_step:
            tiers.wait()
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        batch = sampler.next_batch()
        order[step] = batch
        noise = torch.randn(len(batch), FEATURES) * float(np.random.rand()) * random.random()
        loss = torch.nn.functional.mse_loss(model(data[batch] + 0.01 * noise), target[batch])
        optimizer.zero_grad()
        loss.backward()
        average_gradients(model, world)
        optimizer.step()
        scheduler.step()
        tiers.step(step)
    tiers.wait()
    resumed = tiers.resumed
    torch.save({"model": model.state_dict(), "optim": optimizer.state_dict(), "sched": scheduler.state_dict(),
                "rng": (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()),
                "order": order, "sampler": sampler.state_dict(),
                "resumed": None if resumed is None else vars(resumed), "records": tiers.records()},
               os.path.join(out_dir, f"rank-{rank}.pt"))
    tiers.close()
    dist.destroy_process_group()
    print("OK")


def launch(world, args):
    """Forks `world` workers and waits for them; the first to fail takes the others down (torchrun's default)."""
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])  # imports what every optimizer imports, once, before the fork
    init = f"file://{tempfile.mktemp(prefix='ckpt-tiers-init-')}"
    children = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                log = os.open(os.path.join(args[1], f"log-{rank}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(log, 1), os.dup2(log, 2)
                os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
                worker(args[0], args[1], int(args[2]), *(int(a) for a in args[3:5]), init=init)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush(), sys.stderr.flush()
                os._exit(code)
        children[pid] = rank
    status = {}
    signal.alarm(240)  # a hung job fails the test instead of hanging it (SIGALRM ends the launcher)
    while children:
        pid, raw = os.wait()
        rank = children.pop(pid)
        status[rank] = -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)
        if status[rank] != 0:
            for other in children:
                os.kill(other, signal.SIGKILL)
    if init.startswith("file://") and os.path.exists(init[7:]):
        os.unlink(init[7:])
    print(json.dumps({str(r): status[r] for r in sorted(status)}))


if __name__ == "__main__":
    if sys.argv[1] == "-":  # a worker under torchrun
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        launch(int(sys.argv[1]), sys.argv[2:])
