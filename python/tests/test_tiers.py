"""ckpt.torch.TieredCheckpointer on torch.distributed (gloo): a data-parallel job of 4 processes, each
rank its own node, killed and restarted as torchrun restarts a job; every resumed run must end
bit-identical to an uninterrupted one (spec/PYTHON.md 6, spec/TIERS.md 9).

The job (tiers_worker.py) trains 10 steps (0..9), captures every 2 and persists every 4 with one replica
on the next node: when rank 1 SIGKILLs itself at the start of step 7, steps 4 and 6 are in memory
(each shard on its own node and its replica's) and 0 and 4 are persistent.
"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import ckpt  # noqa: E402
from conftest import flip_byte  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD, STEPS, KILL_STEP, KILL_RANK = 4, 10, 7, 1


def job(root, out, kill=None, persistent=None):
    """One run of the job (a new set of processes); returns every rank's exit status. `persistent`: the
    persistent store's URL instead of ROOT/persistent (tiers_worker.py)."""
    os.makedirs(root, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    args = [sys.executable, os.path.join(HERE, "tiers_worker.py"), str(WORLD), str(root), str(out), str(STEPS)]
    if kill:
        args += [str(kill[0]), str(kill[1])]
    env = dict(os.environ, **({"CKPT_TIERS_PERSISTENT": persistent} if persistent else {}))
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    status = {int(r): rc for r, rc in json.loads(p.stdout.strip().splitlines()[-1]).items()}
    return status


def logs(out):
    return "\n".join(f"--- rank {r}\n" + open(os.path.join(out, f"log-{r}.txt")).read()[-2500:]
                     for r in range(WORLD) if os.path.exists(os.path.join(out, f"log-{r}.txt")))


def finished(out):
    """What every rank wrote at the end of a run (tiers_worker.py)."""
    return [torch.load(os.path.join(out, f"rank-{r}.pt"), weights_only=False) for r in range(WORLD)]


def assert_identical(a, b, path="state"):
    """torch.equal on every tensor (dtype included), == on everything else, recursively."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and np.array_equal(a, b), path
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys()), path
        for k in a:
            assert_identical(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{path}/{i}")
    else:
        assert a == b, (path, a, b)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted run, and the memory roots and persistent store a run killed at step 7 left."""
    base = tmp_path_factory.mktemp("tiers")
    status = job(base / "reference", base / "reference-out")
    assert set(status.values()) == {0}, logs(base / "reference-out")
    reference = finished(base / "reference-out")
    status = job(base / "killed", base / "killed-out", kill=(KILL_STEP, KILL_RANK))
    # The killed rank died by SIGKILL; the launcher then took the others down, as torchrun does.
    assert status[KILL_RANK] == -9, (status, logs(base / "killed-out"))
    assert all(rc != 0 for rc in status.values()), status
    return base, reference


def resume_after(runs, tmp_path, damage=None):
    """Restarts the killed job on a copy of what it left (after `damage`); returns every rank's result."""
    base, reference = runs
    root = tmp_path / "root"
    shutil.copytree(base / "killed", root)
    if damage:
        damage(root)
    out = tmp_path / "out"
    status = job(root, out)
    assert set(status.values()) == {0}, logs(out)
    results = finished(out)
    for rank, (got, ref) in enumerate(zip(results, reference)):
        for part in ("model", "optim", "sched", "rng", "sampler"):
            assert_identical(got[part], ref[part], f"rank {rank} {part}")
        resumed = got["resumed"]["next_step"]
        assert sorted(got["order"]) == list(range(resumed, STEPS))
        assert all(got["order"][s] == ref["order"][s] for s in got["order"]), f"rank {rank}: data order"
    return root, [r["resumed"] for r in results]


def gone(root, *nodes):
    for n in nodes:
        shutil.rmtree(root / f"node-{n}")


def test_a_killed_rank_and_a_restarted_job_resume_from_memory(runs, tmp_path):
    _, resumed = resume_after(runs, tmp_path)
    for rank, r in enumerate(resumed):
        assert not r["fresh"] and r["step"] == 6 and r["world"] == WORLD, r
        assert f"shard {rank} from own memory" in r["sources"][rank], r["sources"]
        assert not r["setbacks"], r["setbacks"]
    assert len({r["digest"] for r in resumed}) == 1  # every rank agreed on the same content


def test_a_lost_node_resumes_from_its_replica(runs, tmp_path):
    _, resumed = resume_after(runs, tmp_path, lambda root: gone(root, "n2"))
    for r in resumed:
        assert r["step"] == 6, r
    # Rank 2 starts on an empty node: its own shard comes back from rank 3, which held the replica.
    assert "shard 2 from replica in memory" in resumed[2]["sources"][2], resumed[2]["sources"]


def test_a_lost_node_and_its_replica_holder_resume_from_the_persistent_store(runs, tmp_path):
    _, resumed = resume_after(runs, tmp_path, lambda root: gone(root, "n2", "n3"))
    for r in resumed:
        assert r["step"] == 4, r  # no copy of shard 2 of step 6 survives; step 4 is persistent
    assert any("from persistent store" in s for s in resumed[2]["sources"]), resumed[2]["sources"]


def test_a_job_whose_every_memory_tier_is_lost_resumes_from_a_persistent_tier_on_s3(runs, s3_url, tmp_path):
    _, reference = runs
    root, out = tmp_path / "root", tmp_path / "out"
    status = job(root, out, persistent=s3_url)
    assert set(status.values()) == {0}, logs(out)
    persisted = ckpt.Store(s3_url, read_only=True)
    assert persisted.steps() == [0, 4, 8] and {i["world_size"] for i in persisted.step_info()} == {WORLD}
    assert ckpt.verify(s3_url).ok
    for n in range(WORLD):  # a power loss: every node's memory tier gone
        shutil.rmtree(root / f"node-n{n}")
    status = job(root, out, persistent=s3_url)
    assert set(status.values()) == {0}, logs(out)
    for rank, (got, ref) in enumerate(zip(finished(out), reference)):
        for part in ("model", "optim", "sched", "rng", "sampler"):
            assert_identical(got[part], ref[part], f"rank {rank} {part}")
        r = got["resumed"]
        assert not r["fresh"] and r["step"] == 8, r
        assert any("from persistent store" in s for s in r["sources"]), r["sources"]


def flip_in_piece(store, step, rank, tensor, numel):
    """Flips one byte of rank `rank`'s piece of `tensor` (F32, `numel` elements) in a memory store's step."""
    with ckpt.safe_open(store, step=step) as f:
        begin, end = numel * rank // WORLD, numel * (rank + 1) // WORLD
        piece = f.get_slice(tensor)[begin:end].tobytes()
    step_dir = next(os.path.join(store, d) for d in os.listdir(store) if d.startswith(f"step-{step}-"))
    shard = next(os.path.join(step_dir, f) for f in os.listdir(step_dir) if f.endswith(".ckpt"))
    data = open(shard, "rb").read()
    assert data.count(piece) == 1
    flip_byte(shard, data.index(piece) + len(piece) // 2)


def test_a_flipped_byte_in_a_copy_is_caught_and_the_next_source_used(runs, tmp_path):
    def damage(root):
        flip_in_piece(str(root / "node-n1" / "rank-1" / "own"), 6, KILL_RANK, "model/0.weight", 16 * 32)

    root, resumed = resume_after(runs, tmp_path, damage)
    for r in resumed:
        assert r["step"] == 6, r  # the same step, from rank 1's replica on node n2
    assert "shard 1 from replica in memory" in resumed[1]["sources"][1], resumed[1]["sources"]
    setbacks = "\n".join(s for r in resumed for s in r["setbacks"])
    assert "set aside own memory copy of shard 1 of step 6" in setbacks, setbacks
    assert "model/0.weight" in setbacks, setbacks  # the damage was named where it was found


# --- One process: the device snapshot path ----------------------------------------------------------


@pytest.fixture
def world_of_one(tmp_path):
    init = tempfile.mktemp(prefix="ckpt-tiers-one-")
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=0, world_size=1)
    try:
        yield tmp_path
    finally:
        dist.destroy_process_group()
        if os.path.exists(init):
            os.unlink(init)


def capture_and_resume(root, device, device_snapshots):
    """Trains 4 steps on `device`, captures step 3, and resumes it into a fresh model; returns both."""
    from ckpt.torch import TieredCheckpointer

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).to(device)
        model[0].register_buffer("counter", torch.arange(5, dtype=torch.int64, device=device))
        model[0].register_buffer("scale", torch.linspace(-1, 1, 7, dtype=torch.bfloat16, device=device))
        model[0].register_buffer("empty", torch.zeros(0, 3, device=device))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        return model, optimizer

    def tiers(model, optimizer):
        return TieredCheckpointer(model, optimizer, memory_root=str(root / "node-0"), memory_every=3, replicas=0,
                                  topology=["node-0"], device_snapshots=device_snapshots, chunk_size_log2=12, when_busy="wait")

    model, optimizer = make()
    t = tiers(model, optimizer)
    assert t.resume() == 0 and t.resumed.fresh
    for step in range(4):
        model(torch.randn(4, 8, device=device)).square().sum().backward()
        optimizer.step()
        assert t.step(step) == ("capture" if step % 3 == 0 else "none")
    t.wait()
    t.close()
    saved_rng = torch.get_rng_state()
    random.random(), torch.rand(3)  # moved on: resume must restore them
    model2, optimizer2 = make()
    t2 = tiers(model2, optimizer2)
    assert t2.resume() == 4 and t2.resumed.step == 3
    t2.close()
    assert torch.equal(torch.get_rng_state(), saved_rng)
    assert_identical(model2.state_dict(), model.state_dict())
    assert_identical(optimizer2.state_dict(), optimizer.state_dict())


def test_device_snapshot_path_through_the_copier(world_of_one):
    """The copier plumbing (pieces handed over by address, copied by DeviceSnapshot into the memory tier's slot
    it pinned, fenced) with CPU tensors: what runs on a GPU minus the CUDA stream and cudaHostRegister."""
    from ckpt.torch import DeviceSnapshot

    class EveryTensor(DeviceSnapshot):
        calls = {"allocate": 0, "copy": 0, "fence": 0, "release": 0, "pin": 0, "unpin": 0}

        def handles(self, t):
            return True

        def __getattribute__(self, name):
            calls = object.__getattribute__(self, "calls")
            if name in calls:
                calls[name] += 1
            return object.__getattribute__(self, name)

    copier = EveryTensor()
    capture_and_resume(world_of_one, "cpu", device_snapshots=copier)
    # The copies land in the memory tier's slots (spec/ASYNC.md 6.1): each slot pinned once when mapped and unpinned
    # before it is unmapped, no staging pool.
    assert copier.calls["allocate"] == 0 and copier.calls["release"] == 0, copier.calls
    assert copier.calls["pin"] >= 1 and copier.calls["unpin"] == copier.calls["pin"], copier.calls
    assert copier.calls["copy"] >= 8 and copier.calls["fence"] >= 2, copier.calls  # 2 captures of 8 tensors


def test_a_resume_reads_into_the_live_tensors_when_the_state_has_the_same_structure(world_of_one):
    """A restarted job that has built its model and optimizer state (as a warm agent's does) gets the step's bytes
    straight into those tensors: the same storage before and after, and the state the saved one, bit for bit."""
    from ckpt.torch import TieredCheckpointer

    def make(seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model(torch.randn(4, 8)).square().sum().backward()
        optimizer.step()  # the optimizer's state exists
        return model, optimizer

    def tiers(model, optimizer):
        return TieredCheckpointer(model, optimizer, memory_root=str(world_of_one / "node-0"), memory_every=1, replicas=0,
                                  topology=["node-0"], when_busy="wait")

    model, optimizer = make(0)
    t = tiers(model, optimizer)
    assert t.resume() == 0
    t.step(0)
    t.close()
    model2, optimizer2 = make(1)  # other values, the same structure
    storage = [p.data_ptr() for p in model2.parameters()] + \
              [v.data_ptr() for s in optimizer2.state.values() for v in s.values() if v.numel() > 1]
    t2 = tiers(model2, optimizer2)
    assert t2.resume() == 1
    t2.close()
    assert_identical(model2.state_dict(), model.state_dict())
    assert_identical(optimizer2.state_dict(), optimizer.state_dict())
    assert [p.data_ptr() for p in model2.parameters()] + \
        [v.data_ptr() for s in optimizer2.state.values() for v in s.values() if v.numel() > 1] == storage


def test_the_background_runs_at_the_nice_value_given_and_the_training_thread_keeps_its_own(world_of_one):
    """spec/ASYNC.md 1: the saver's worker (which calls on_phase) runs at background_nice; the caller's
    thread is never changed. A value outside 0-19 is refused."""
    from ckpt.torch import TieredCheckpointer

    model = torch.nn.Linear(8, 4)
    seen = []

    def on_phase(phase, step):
        tid = threading.get_native_id()
        seen.append((phase, os.getpriority(os.PRIO_PROCESS, tid), tid == threading.main_thread().native_id))

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    t = TieredCheckpointer(model, memory_root=str(world_of_one / "node-0"), memory_every=1, replicas=0,
                           topology=["node-0"], when_busy="wait", on_phase=on_phase, background_nice=before + 7)
    assert t.resume() == 0
    t.step(0)
    t.wait()
    t.close()
    background = [(phase, nice) for phase, nice, main in seen if not main]
    assert background and all(nice == before + 7 for _, nice in background), seen
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
    with pytest.raises(ValueError, match="background_nice"):
        TieredCheckpointer(model, memory_root=str(world_of_one / "node-1"), replicas=0, topology=["node-1"], background_nice=20)


def test_a_restarted_process_whose_optimizer_has_no_state_yet_reads_the_parameters_into_the_live_tensors(world_of_one):
    """As a relaunched job has it: the model built, the optimizer made but never stepped. The model's part matches
    the step, so its bytes go straight into the live parameters (no second copy in load_state_dict); the optimizer's
    state goes into new tensors the optimizer adopts."""
    from ckpt.torch import TieredCheckpointer

    def make(seed, stepped):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        if stepped:
            model(torch.randn(4, 8)).square().sum().backward()
            optimizer.step()
        return model, optimizer

    def tiers(model, optimizer):
        return TieredCheckpointer(model, optimizer, memory_root=str(world_of_one / "node-0"), memory_every=1, replicas=0,
                                  topology=["node-0"], when_busy="wait")

    model, optimizer = make(0, True)
    t = tiers(model, optimizer)
    assert t.resume() == 0
    t.step(0)
    t.close()
    model2, optimizer2 = make(1, False)
    assert not optimizer2.state
    storage = [p.data_ptr() for p in model2.parameters()]
    t2 = tiers(model2, optimizer2)
    assert t2.resume() == 1
    t2.close()
    assert [p.data_ptr() for p in model2.parameters()] == storage
    assert_identical(model2.state_dict(), model.state_dict())
    assert_identical(optimizer2.state_dict(), optimizer.state_dict())


def test_a_step_whose_optimizer_groups_differ_is_refused_before_a_byte_reaches_the_live_model(world_of_one):
    """The model's part would match, but the optimizer's parameter groups do not: Optimizer.load_state_dict
    refuses the step, so nothing may be read into the live parameters before it (they keep their values)."""
    from ckpt.torch import TieredCheckpointer

    def make(groups):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
        params = [{"params": model[0].parameters()}, {"params": model[1].parameters()}] if groups == 2 else model.parameters()
        return model, torch.optim.AdamW(params, lr=1e-2)

    def tiers(model, optimizer):
        return TieredCheckpointer(model, optimizer, memory_root=str(world_of_one / "node-0"), memory_every=1, replicas=0,
                                  topology=["node-0"], when_busy="wait")

    model, optimizer = make(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the saved values differ from a fresh model's
    t = tiers(model, optimizer)
    assert t.resume() == 0
    t.step(0)
    t.close()
    model2, optimizer2 = make(2)
    before = {k: v.clone() for k, v in model2.state_dict().items()}
    t2 = tiers(model2, optimizer2)
    with pytest.raises(ckpt.CkptError, match="refusing to start over") as caught:
        t2.resume()
    t2.close()
    assert "parameter groups" in str(caught.value.__cause__)
    assert_identical(model2.state_dict(), before)


def test_cuda_tensors_copied_device_to_host_into_pinned_staging(world_of_one):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the device-to-host snapshot on a side stream is not exercised")
    capture_and_resume(world_of_one, "cuda", device_snapshots=None)  # default: on, since the model is on CUDA


def test_a_step_the_load_callback_refuses_is_failed_and_the_reason_kept(world_of_one):
    from ckpt.torch import TieredCheckpointer

    def tiers(width):
        model = torch.nn.Linear(4, width)
        return TieredCheckpointer(model, memory_root=str(world_of_one / "node-0"), memory_every=1, replicas=0,
                                  topology=["node-0"], when_busy="wait")

    t = tiers(3)
    assert t.resume() == 0
    t.step(0)
    t.close()
    t = tiers(5)  # the model changed shape: its state dict does not fit the step
    with pytest.raises(ckpt.CkptError, match="refusing to start over") as caught:
        t.resume()
    assert "size mismatch for weight" in str(caught.value.__cause__)  # this rank's reason, from load_state_dict
    t.close()


def run_ranks(tmp_path, name, script_text, world=2, timeout=240):
    """Runs script_text on `world` gloo ranks (argv: rank, world, job root, init); returns (code, stdout, stderr) each."""
    root = tmp_path / "job"
    root.mkdir(exist_ok=True)
    script = tmp_path / f"{name}.py"
    script.write_text(script_text)
    init = f"file://{tmp_path / (name + '-init')}"
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), str(root), init], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    return [(p.returncode, out, err) for p in procs for out, err in [p.communicate(timeout=timeout)]]


# --- A capture while the previous one is in the background (spec/TIERS.md 4.6) ---------------------------

SKIP_WHILE_BUSY = r'''
import json, os, sys, time, torch, torch.distributed as dist
from ckpt.torch import TieredCheckpointer
rank, world, root, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
marks = os.path.join(root, "returned-from-step-4")
os.makedirs(marks, exist_ok=True)

def on_phase(phase, step):
    # Step 2's replication waits until every rank's step(4) has returned: were step(4) to wait for it,
    # the job would stall here until the deadline. time.sleep releases the GIL to the training loop.
    if phase == "replicating" and step == 2:
        deadline = time.monotonic() + 60
        while len(os.listdir(marks)) < world and time.monotonic() < deadline:
            time.sleep(0.01)

torch.manual_seed(0)  # a data-parallel replica: every rank the same model (the canary compares them)
model = torch.nn.Linear(64, 64)
tiers = TieredCheckpointer(model, memory_root=os.path.join(root, f"node-n{rank}"), memory_every=2, replicas=1,
                           memory_keep=2, topology=[f"n{r}" for r in range(world)], on_phase=on_phase)
tiers.resume()
actions = {}
for step in range(1, 7):
    model.weight.data += 1
    actions[step] = tiers.step(step)
    if step == 4:
        open(os.path.join(marks, str(rank)), "w").close()
        tiers.wait()  # step 6 finds the background idle
tiers.wait()
print(json.dumps({"actions": actions, "skipped": tiers.steps_skipped, "records": tiers.records()}), flush=True)
tiers.close()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # past torch's gloo exit race (pytorch/pytorch#190489), as dcp_worker.py
'''


def test_a_capture_due_while_the_previous_one_replicates_is_skipped_on_every_rank_and_recorded(tmp_path):
    for code, out, err in run_ranks(tmp_path, "skip_while_busy", SKIP_WHILE_BUSY):
        assert code == 0, err[-3000:]
        got = json.loads(out.strip().splitlines()[-1])
        assert got["actions"] == {"1": "none", "2": "capture", "3": "none", "4": "skipped", "5": "none", "6": "capture"}, got
        assert got["skipped"] == 1
        assert [r for r in got["records"] if r.startswith("SKIPPED")] and any("step 4" in r for r in got["records"]
                                                                              if r.startswith("SKIPPED")), got["records"]


# --- No interpreter on the data path (spec/TIERS.md 4.7) ------------------------------------------------

REPLICATE_WHILE_GIL_HELD = r'''
import json, os, sys, torch, torch.distributed as dist
from ckpt.torch import TieredCheckpointer
rank, world, root, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
torch.manual_seed(0)  # a data-parallel replica: every rank the same model (the canary compares them)
model = torch.nn.Linear(1024, 1024)  # 4 MiB of weights: several transfer blocks
tiers = TieredCheckpointer(model, memory_root=os.path.join(root, f"node-n{rank}"), memory_every=1, replicas=1,
                           memory_keep=2, topology=[f"n{r}" for r in range(world)], transfer_block=1 << 20)
tiers.resume()
model.weight.data += 1
tiers.step(1)
# The training thread holds the GIL without a break (a C++ call that never releases it) while step 1
# commits, agrees and replicates in the background: every byte and message of that goes over gloo in C++.
replicated = tiers._native._hold_gil_until_replicated(1, 60.0)
tiers.wait()
print(json.dumps({"replicated_while_held": replicated, "records": tiers.records()}), flush=True)
tiers.close()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # past torch's gloo exit race (pytorch/pytorch#190489), as dcp_worker.py
'''


def test_a_capture_replicates_while_the_training_thread_holds_the_gil(tmp_path):
    # With the tiers' messages carried by Python (a torch group), the background could not take one step
    # while the GIL was held: the hold timed out. Over gloo in C++ the replica is verified and recorded.
    for code, out, err in run_ranks(tmp_path, "replicate_while_gil_held", REPLICATE_WHILE_GIL_HELD):
        assert code == 0, err[-3000:]
        got = json.loads(out.strip().splitlines()[-1])
        assert got["replicated_while_held"] is True, got
        assert any(r.startswith("HELD") and "step 1" in r for r in got["records"]), got["records"]


# --- A job that ends on a background failure without close() ------------------------------------------

EXIT_WITHOUT_CLOSE = r'''
import os, sys, torch, torch.distributed as dist
from ckpt.torch import TieredCheckpointer
rank, world, root, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
torch.manual_seed(0)  # a data-parallel replica: every rank the same model (the canary compares them)
model = torch.nn.Linear(8, 8)
phases = []
tiers = TieredCheckpointer(model, memory_root=os.path.join(root, f"node-n{rank}"), persistent=os.path.join(root, "persistent"),
                           memory_every=1, persist_every=2, replicas=1, memory_keep=2, topology=[f"n{r}" for r in range(world)],
                           when_busy="wait", on_phase=lambda phase, step: phases.append(phase))  # the worker calls Python
tiers.resume()
try:
    for step in range(1, 20):
        model.weight.data += 1
        tiers.step(step)  # raises once the promotion of step 2 has failed in the background
    print("no failure reached the training loop")
finally:
    # What a torch job does at its end anyway; torch's own gloo threads can otherwise abort a finalizing
    # interpreter (pytorch/pytorch#190489). The tiers are never closed: their atexit closer must do it.
    dist.destroy_process_group()
'''


def test_a_job_that_exits_on_a_background_failure_without_close_exits_with_the_error(tmp_path):
    # The persistent store's path is a file: the first promotion fails in the background, the next
    # step() raises it, and each rank's script ends with that exception, never calling close(). Every
    # rank must exit as Python does on an uncaught exception (1), with the error, not abort (134: before
    # the atexit closer, the worker calling on_phase took the GIL from a finalizing interpreter).
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "persistent").write_text("not a store")
    for code, out, err in run_ranks(tmp_path, "exit_without_close", EXIT_WITHOUT_CLOSE):
        assert "terminate called" not in err, err[-3000:]
        assert code == 1, (code, err[-3000:])
        assert "persistent" in err, err[-3000:]


# --- The SDC canary (spec/TIERS.md 11) --------------------------------------------------------------------

SDC_JOB = r'''
import json, os, sys, torch, torch.distributed as dist
import ckpt
from ckpt.torch import TieredCheckpointer
rank, world, root, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
FLIP_AT, RUN_TO = __FLIP_AT__, __RUN_TO__
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)

def make():
    torch.manual_seed(0)  # every rank the same model: a data-parallel replica
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16))

def train(model, step):
    with torch.no_grad():
        for p in model.parameters():
            p += 0.001 * step

model = make()
tiers = TieredCheckpointer(model, memory_root=os.path.join(root, f"node-n{rank}"), memory_every=2, replicas=1, memory_keep=2,
                           topology=[f"n{r}" for r in range(world)], when_busy="wait", replicated=["model/1.weight", "model/1.bias"])
start = tiers.resume()
out = {"resumed": tiers.resumed.step if not tiers.resumed.fresh else None}
try:
    for step in range(max(start, 1), RUN_TO + 1):
        train(model, step)
        if rank == 1 and step == FLIP_AT:
            bits = model[1].weight.data.view(torch.int32)
            bits[5] ^= 1 << 4  # a silent bit flip in this rank's copy of a tensor every rank holds
        tiers.step(step)
    tiers.wait()
    reference = make()
    for step in range(1, RUN_TO + 1):
        train(reference, step)
    out["identical"] = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
except ckpt.SilentDataCorruptionError as e:
    out["sdc"] = str(e)
print(json.dumps(out), flush=True)
tiers.close()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # past torch's gloo exit race (pytorch/pytorch#190489), as dcp_worker.py
'''


def test_a_bit_flipped_in_one_ranks_replicated_tensor_is_named_and_the_job_resumes_the_last_agreeing_step(tmp_path):
    # Three gloo ranks hold the same LayerNorm; rank 1's weight gets a bit flipped before capture 4. Every rank
    # raises SilentDataCorruptionError naming rank 1; relaunched, the job resumes step 2 and ends as an
    # uninterrupted run, bit for bit.
    flipped = SDC_JOB.replace("__FLIP_AT__", "4").replace("__RUN_TO__", "4")
    for code, out, err in run_ranks(tmp_path, "sdc_flip", flipped, world=3):
        assert code == 0, err[-3000:]
        got = json.loads(out.strip().splitlines()[-1])
        assert "silent data corruption at step 4" in got.get("sdc", ""), got
        assert "tensor 'model/1.weight'" in got["sdc"] and "rank 1 differs from every other holder" in got["sdc"], got
    clean = SDC_JOB.replace("__FLIP_AT__", "0").replace("__RUN_TO__", "6")
    for code, out, err in run_ranks(tmp_path, "sdc_resume", clean, world=3):
        assert code == 0, err[-3000:]
        got = json.loads(out.strip().splitlines()[-1])
        assert got["resumed"] == 2 and got["identical"] is True, got


# --- Parity groups (spec/TIERS.md 12) ----------------------------------------------------------------------

PARITY_JOB = r'''
import json, os, sys, torch, torch.distributed as dist
from ckpt.torch import TieredCheckpointer
rank, world, root, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
RUN_TO = __RUN_TO__
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)

def make():
    torch.manual_seed(0)  # a data-parallel replica: each rank saves its slice of every tensor
    return torch.nn.Linear(64, 64)

def train(model, step):
    with torch.no_grad():
        for p in model.parameters():
            p += 0.001 * step

model = make()
tiers = TieredCheckpointer(model, memory_root=os.path.join(root, f"node-n{rank}"), memory_every=2, memory_keep=2,
                           topology=[f"n{r}" for r in range(world)], when_busy="wait", parity=(world, 1))
start = tiers.resume()
out = {"resumed": tiers.resumed.step if not tiers.resumed.fresh else None, "setbacks": tiers.resumed.setbacks,
       "groups": tiers.placement()["parity_groups"]}
for step in range(max(start, 1), RUN_TO + 1):
    train(model, step)
    tiers.step(step)
tiers.wait()
reference = make()
for step in range(1, RUN_TO + 1):
    train(reference, step)
out["identical"] = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
out["records"] = tiers.records()
print(json.dumps(out), flush=True)
tiers.close()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # past torch's gloo exit race (pytorch/pytorch#190489), as dcp_worker.py
'''


def test_a_lost_node_of_a_parity_group_is_rebuilt_from_the_others_and_the_job_resumes_bit_identically(tmp_path):
    # Three gloo ranks in one parity group surviving one loss, no replicas; node n1's memory deleted; the
    # relaunched job rebuilds rank 1's shard from the other two ranks' data and parity and resumes step 4.
    for code, out, err in run_ranks(tmp_path, "parity_first", PARITY_JOB.replace("__RUN_TO__", "5"), world=3):
        assert code == 0, err[-3000:]
        got = json.loads(out.strip().splitlines()[-1])
        assert got["groups"] == [[0, 1, 2]] and got["identical"], got
        assert any(r.startswith("PARITY step 4") for r in got["records"]), got["records"]
    gone(tmp_path / "job", "n1")
    for rank, (code, out, err) in enumerate(run_ranks(tmp_path, "parity_resume", PARITY_JOB.replace("__RUN_TO__", "8"), world=3)):
        assert code == 0, err[-3000:]
        got = json.loads(out.strip().splitlines()[-1])
        assert got["resumed"] == 4 and got["identical"] is True, got
        if rank == 1:
            assert any("rebuilt from its parity group" in s for s in got["setbacks"]), got["setbacks"]
            assert any(r.startswith("REBUILT step 4") for r in got["records"]), got["records"]


def test_a_bit_flipped_in_a_data_parallel_tensor_is_caught_by_the_replica_holders_live_copy(tmp_path):
    # The same job, its Linear weight not declared replicated: each rank saves its third of it. Rank 1's live
    # weight gets bits flipped before capture 4 (row 5: in rank 0's range, which rank 1 holds the replica of, and
    # in its own, whose replica rank 2 holds): the live copies' digests differ from the owners', every rank raises.
    flipped = SDC_JOB.replace("__FLIP_AT__", "4").replace("__RUN_TO__", "4").replace(
        "bits = model[1].weight.data.view(torch.int32)", "bits = model[0].weight.data.view(torch.int32)")
    for code, out, err in run_ranks(tmp_path, "sdc_live", flipped, world=3):
        assert code == 0, err[-3000:]
        got = json.loads(out.strip().splitlines()[-1])
        assert "silent data corruption at step 4" in got.get("sdc", ""), got
        assert "tensor 'model/0.weight@" in got["sdc"], got
