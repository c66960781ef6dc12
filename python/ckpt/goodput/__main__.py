"""python -m ckpt.goodput: goodput under failures, ckpt against DCP and torch.save (see ckpt/goodput/__init__.py)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import replace
from typing import Optional

from .._host import mount_of
from ..bench import cpu_model, has_avx512, parse_size
from . import calibration as _cal
from . import job as _job
from . import report as _report
from . import supervisor as _sup

MiB = 1 << 20


def parse_mix(text: str) -> dict:
    mix = {}
    for part in text.split(","):
        if "=" not in part:
            raise argparse.ArgumentTypeError(f"not KIND=SHARE: {part!r}")
        k, v = part.split("=", 1)
        if k.strip() not in _sup.KINDS:
            raise argparse.ArgumentTypeError(f"unknown failure kind {k!r}; one of {', '.join(_sup.KINDS)}")
        mix[k.strip()] = float(v)
    total = sum(mix.values())
    if total <= 0 or any(v < 0 for v in mix.values()):
        raise argparse.ArgumentTypeError("failure shares must be >= 0 and not all 0")
    return {k: mix.get(k, 0.0) / total for k in _sup.KINDS}


def arguments(argv):
    from . import __doc__ as overview

    p = argparse.ArgumentParser(prog="python -m ckpt.goodput", description=overview,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Exit status: 0 every contender finished, 1 a contender failed or a ckpt "
                                       "contender did not resume bit-identically, 2 usage error.")
    p.add_argument("--dir", help="persistent storage of the contenders (a disk directory; default: a new one in $TMPDIR)")
    p.add_argument("--memory-dir", default="/dev/shm", help="where the node memory tiers live (default /dev/shm)")
    p.add_argument("--state-size", type=parse_size, default=None, help="checkpointed state (parameters + AdamW moments), default 1GiB")
    p.add_argument("--hidden", type=int, default=None, help="MLP width (default 2048; --quick 256)")
    p.add_argument("--world", type=int, default=4, help="ranks (default 4)")
    p.add_argument("--nodes", type=int, default=2, help="simulated nodes the ranks are spread over (default 2)")
    p.add_argument("--steps", type=int, default=None, help="useful training steps (default 40; --quick 40)")
    p.add_argument("--batch", type=int, default=16, help="samples per rank per step (default 16)")
    p.add_argument("--seed", type=int, default=1, help="seed of the model, the data and the failure schedule")
    p.add_argument("--mtbf", type=float, default=None, help="mean seconds between failures (default: the ideal run's time / --failures)")
    p.add_argument("--failures", type=float, default=10, help="expected failures in the ideal run's time, to scale the MTBF (default 10)")
    p.add_argument("--mix", type=parse_mix, default=parse_mix("crash=0.6,node=0.3,power=0.1"),
                   help="shares of the failure kinds (default crash=0.6,node=0.3,power=0.1)")
    p.add_argument("--interval", type=int, default=None,
                   help="one fixed interval for every contender, in steps (tiered: its memory interval); default: "
                        "each contender's optimum from ckpt-plan's model and its own calibrated costs")
    p.add_argument("--persist-every", type=int, default=4, help="with --interval: tiered promotes every this many captures (default 4)")
    p.add_argument("--contenders", default=",".join(_job.CONTENDERS[1:]),
                   help=f"which to run besides ideal (default all: {','.join(_job.CONTENDERS[1:])})")
    p.add_argument("--calibrate", type=int, default=4, help="saves measured per contender before its run (default 4)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="cuda with NCCL where GPUs are (default auto)")
    p.add_argument("--limit", type=float, default=None, help="seconds one contender may run before it is failed (default: 8x the ideal run + 120)")
    p.add_argument("--profile", choices=("cpu", "accelerator"), default="cpu",
                   help="cpu: each step trains on the host's cores (default); accelerator: each step is a fixed "
                        "device time (--device-step) during which the host's cores are free, emulated by waiting "
                        "on a machine without one")
    p.add_argument("--device-step", type=float, default=2.0, help="accelerator profile: seconds of device time a step (default 2.0)")
    p.add_argument("--storage-gbps", type=float, default=0.0,
                   help="every node reaches the persistent storage through a link of this many GB/s that its ranks "
                        "share, for every contender (1: a cluster's, Llama 3's 2 TB/s for 2,048 nodes); default 0: "
                        "this machine's own speed")
    p.add_argument("--quick", action="store_true", help="a small job for CI: 16 MiB of state, 40 steps, 4 expected failures")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON ('-': stdout, and no table)")
    p.add_argument("--plot", metavar="FILE", help="write the timelines and goodput bars (PNG)")
    p.add_argument("--keep", action="store_true", help="keep --dir (stores, event logs, rank logs) afterwards")
    args = p.parse_args(argv)
    if args.quick:
        args.state_size = args.state_size or 16 * MiB
        args.hidden = args.hidden or 256
        args.steps = args.steps or 40
        args.failures = args.failures if "--failures" in (argv or sys.argv) else 4
        args.calibrate = min(args.calibrate, 3)
    args.state_size = args.state_size or (1 << 30)
    args.hidden = args.hidden or 2048
    args.steps = args.steps or 40
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    bad = [c for c in contenders if c not in _job.CONTENDERS[1:]]
    if bad:
        p.error(f"unknown contender(s) {', '.join(bad)}; choose from {', '.join(_job.CONTENDERS[1:])}")
    args.contenders = ["ideal"] + [c for c in _job.CONTENDERS[1:] if c in contenders]
    if args.world < 2 or not 1 <= args.nodes <= args.world or args.steps < 2 or args.batch < 1 or args.calibrate < 2:
        p.error("--world >= 2, 1 <= --nodes <= --world, --steps >= 2, --batch >= 1, --calibrate >= 2")
    if args.interval is not None and (args.interval < 1 or args.persist_every < 1):
        p.error("--interval and --persist-every must be at least 1")
    if args.mtbf is not None and args.mtbf <= 0:
        p.error("--mtbf must be positive")
    if args.device_step <= 0:
        p.error("--device-step must be positive")
    if args.storage_gbps < 0:
        p.error("--storage-gbps must be at least 0")
    return args


def _mount_of(path: str) -> str:
    """'DEVICE (TYPE) at MOUNTPOINT' of the file system holding path."""
    mnt, kind, dev = mount_of(path) or ("/", "?", "?")
    return f"{dev} ({kind}) at {mnt}"


def machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores, {'AVX-512' if has_avx512() else 'no AVX-512'}"


class Bench:
    def __init__(self, args):
        import torch

        self.args = args
        torch.set_num_threads(1)  # before any op: forked ranks must not inherit an OpenMP pool
        self.device = "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
        h = args.hidden
        self.layers = max(1, round(args.state_size / _job.state_bytes(h, 1)))
        self.model = _job.build_model(h, self.layers, args.seed)
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])  # import what the optimizer imports once, before forking
        self.root = args.dir or tempfile.mkdtemp(prefix="ckpt-goodput-")
        self.own_root = args.dir is None
        os.makedirs(self.root, exist_ok=True)
        self.memory = tempfile.mkdtemp(prefix="ckpt-goodput-mem-", dir=args.memory_dir)
        self.logs = os.path.join(self.root, "logs")
        os.makedirs(self.logs, exist_ok=True)

    def config(self, contender: str, tag: str, **kw) -> _job.JobConfig:
        a = self.args
        workdir = os.path.join(self.root, contender)
        os.makedirs(workdir, exist_ok=True)
        events = os.path.join(self.root, f"events-{contender}-{tag}.jsonl")
        if os.path.exists(events):
            os.unlink(events)
        return _job.JobConfig(contender=contender, world=a.world, nodes=a.nodes, hidden=a.hidden, layers=self.layers,
                              batch=a.batch, steps=a.steps, seed=a.seed, workdir=workdir,
                              memory_base=os.path.join(self.memory, contender), events=events, device=self.device,
                              profile=a.profile, device_step_s=a.device_step, storage_gbps=a.storage_gbps, **kw)

    def clean(self, cfg: _job.JobConfig) -> None:
        shutil.rmtree(cfg.workdir, ignore_errors=True)
        shutil.rmtree(cfg.memory_base, ignore_errors=True)
        os.makedirs(cfg.workdir, exist_ok=True)

    def progress(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    # --- calibration -------------------------------------------------------------------------------
    def calibrate(self, name: str) -> dict:
        """Save costs from a failure-free run that saves at every step and waits for the first half's saves
        (calibration.py); restart and load costs from launches that only resume (tiered: once from memory,
        once after wiping it)."""
        a = self.args
        tiered = name in _job.TIERED
        # The tiers' first captures each fill a memory slot of the ring for the first time: left out, with as
        # many more saves measured (a relaunched process finds its slots allocated).
        warmup = _job.KEEP if tiered else 1
        waited = a.calibrate + warmup
        persist_every = 2 if tiered else 0  # tiered: captures and promotions alternate, each measured apart
        cfg = self.config(name, "calibrate", interval=1, persist_every=persist_every, calibrate=waited)
        if 2 * waited > a.steps:
            raise _sup.JobError(f"--steps {a.steps} is too few to calibrate {waited} waited and as many overlapped saves")
        self.clean(cfg)
        limit = self.limit
        _sup.run_job(cfg, self.model, self.logs, limit)
        out = _cal.save_costs(_sup.read_events(cfg.events), self.step_s, tiered, warmup=warmup,
                              persist_every=persist_every or 1)
        out["restart"] = self._resume_cost(replace(cfg, calibrate=0, resume_only=True), 1)
        if tiered:
            _sup.wipe_memory(cfg)
            out["persistent_restart"] = self._resume_cost(replace(cfg, calibrate=0, resume_only=True), 2)
        self.clean(cfg)
        return out

    def _resume_cost(self, cfg: _job.JobConfig, attempt: int) -> float:
        before = len(_sup.read_events(cfg.events))
        _sup.run_job(cfg, self.model, self.logs, self.limit, first_attempt=attempt)
        ev = _sup.read_events(cfg.events)[before:]
        launch = next(e for e in ev if e["ev"] == "launch")
        loaded = next(e for e in ev if e["ev"] == "loaded")
        if loaded.get("source") is None:
            raise _sup.JobError(f"{cfg.contender}: the resume-only launch found nothing to resume")
        return loaded["t"] - launch["t"]

    # --- planning ----------------------------------------------------------------------------------
    def _model(self, name: str, costs: dict, mtbf: float, mix: Optional[dict] = None) -> dict:
        """ckpt-plan's inputs for a contender: its calibrated costs and the failures' mean interval `mtbf` (and
        shares of the kinds, `mix`; default --mix). A save's stall for the model is its measured stall plus the
        compute its background work took from training (its interference)."""
        a = self.args
        if name in _job.TIERED:
            mix = mix or a.mix
            shares = dict(crash_share=mix["crash"], node_loss_share=mix["node"], power_loss_share=mix["power"])
            return dict(capture_stall=max(costs["capture_stall"] + costs["interference"], 1e-6),
                        replicate_seconds=costs["replicate_seconds"],
                        persist_stall=costs["persist_stall"] + costs["persist_interference"],
                        persist_seconds=costs["persist_seconds"], mtbf=mtbf, memory_restart=costs["restart"],
                        persistent_restart=costs["persistent_restart"], replicated=a.nodes > 1, **shares)
        return dict(stall=max(costs["stall"] + costs["interference"], 1e-6), background=costs["background"], mtbf=mtbf,
                    restart=costs["restart"])

    def _waste(self, name: str, costs: dict, every: int, k: Optional[int], mtbf: float, mix: Optional[dict] = None) -> dict:
        """ckpt-plan's waste at `every` steps between saves (tiered: and promotions every `k` captures)."""
        from .. import plan

        t = self.step_s
        if name in _job.TIERED:
            # The Monte Carlo follows the checkpointer's own rules (spec/PLAN.md 10.5.1): its ring of KEEP slots and
            # when_busy "skip" (the TierOptions default), so a promotion that outlasts the ring costs the captures it skips.
            at = plan.tiered(**self._model(name, costs, mtbf, mix), memory_interval=every * t, persist_every=k, simulate=400,
                             seed=self.args.seed, memory_slots=max(_job.KEEP, 2), when_busy="skip")
            return {"waste": at["simulated_waste"] if at.get("simulated_waste") is not None else at["waste"],
                    "closed_form_waste": at["waste"], "predicted_skips_per_capture": at.get("simulated_skips_per_capture")}
        return {"waste": plan.single(**self._model(name, costs, mtbf), interval=every * t)["waste"]}

    def _goodput_of(self, waste: Optional[float]) -> Optional[float]:
        if waste is None or waste >= 1:
            return None
        return self.ideal_wall / (self.startup + (self.ideal_wall - self.startup) / (1 - waste))

    def predict(self, entry: dict, schedule) -> None:
        """The goodput ckpt-plan predicts at the contender's interval, from the failure rate this run's seeded
        schedule has over the predicted run rather than the MTBF it was drawn with (one draw of a few dozen
        failures can stray from its mean by a fifth), and for the tiers the shares of the kinds among those failures
        rather than --mix (a power loss costs them far more than a crash; the CPU profile's runs met twice the mix's
        share): a fixed point, since the predicted wall time decides how many of the schedule's failures fall within
        it. The policy was chosen with the MTBF and --mix alone, as a job would."""
        from ..errors import UnsupportedError

        nominal = self._goodput_of(entry["waste"])
        entry["predicted_goodput_nominal"] = nominal
        entry["predicted_goodput"], entry["predicted_mtbf_s"] = nominal, self.mtbf
        if nominal is None:
            return
        wall = self.ideal_wall / nominal
        tiered = entry["name"] in _job.TIERED  # a single save's model has no kinds: every failure costs it alike
        for _ in range(8):
            within = [f.kind for f in schedule if f.at < wall]
            mtbf = wall / len(within) if within else 1e9  # no failure within it: only the saves' cost remains
            mix = {kind: within.count(kind) / len(within) for kind in ("crash", "node", "power")} if within and tiered else None
            try:
                g = self._goodput_of(self._waste(entry["name"], entry["costs"], entry["interval_steps"],
                                                 entry.get("persist_every_k"), mtbf, mix)["waste"])
            except UnsupportedError:
                return
            if g is None:
                return
            entry["predicted_goodput"], entry["predicted_mtbf_s"] = g, mtbf
            if mix is not None:
                entry["predicted_mix"] = mix
            if abs(self.ideal_wall / g - wall) < 0.01 * wall:
                return
            wall = self.ideal_wall / g

    def _whole_steps(self, name: str, costs: dict, every: float, k: Optional[int]) -> tuple:
        """The policy in whole steps with the least waste by the model's own timeline: intervals from half to
        twice `every` steps (the model's optimum in steps, not rounded) and, tiered, promotions every 1 to
        2 `k` + 1 captures (at most 8 of each). The tiered closed form is first order (spec/PLAN.md 10.6):
        where failures come every few steps it strays from its timeline by more than the choice it makes
        (the accelerator profile's: it promoted every second capture where its Monte Carlo wasted less
        promoting every one), so the Monte Carlo of 10.5 judges the candidates, all with one seed (the same
        draws). A single save's model is exact (3.2): only the rounding to whole steps is chosen.
        Returns (every, k, waste)."""
        from ..errors import UnsupportedError

        def spread(lo: int, hi: int) -> list:  # at most 8 whole numbers from lo to hi, closer together low
            return sorted({max(1, round(lo * (hi / lo) ** (i / 7))) for i in range(8)})

        intervals = spread(max(1, int(every / 2)), max(2, int(2 * every + 1)))
        periods = spread(1, 2 * k + 1) if k is not None else [None]
        best = None
        for e in intervals:
            if e > self.args.steps:
                break
            for kk in periods:
                try:
                    w = self._waste(name, costs, e, kk, self.mtbf)["waste"]
                except UnsupportedError:
                    continue
                if w is not None and (best is None or w < best[2]):
                    best = (e, kk, w)
        return best if best is not None else (max(1, round(every)), k, None)

    def plan(self, name: str, costs: dict) -> dict:
        """The interval (steps) and ckpt-plan's predicted waste at it, with the MTBF."""
        from .. import plan
        from ..errors import UnsupportedError

        a, t, m = self.args, self.step_s, self.mtbf
        notes = []
        if name in _job.TIERED:
            common = self._model(name, costs, m)
            every, k = (a.interval, a.persist_every) if a.interval is not None else (None, None)
            if every is None:
                try:
                    best = plan.tiered(**common)
                    optimum, k0 = best["optimum_memory_interval_seconds"] / t, max(1, int(best["optimum_persist_every"]))
                    every, k, _ = self._whole_steps(name, costs, optimum, k0)
                    notes.append(f"captures every {every} and promotions every {k} by the model's timeline; its closed "
                                 f"form's optimum: every {optimum:.2f} steps, promoting every {k0}")
                except UnsupportedError as e:
                    every, k = 1, 1
                    notes.append(f"ckpt-plan found no interval that keeps any work ({e}); capturing every step")
            try:
                at = self._waste(name, costs, every, k, m)
            except UnsupportedError as e:
                at = {"waste": None, "closed_form_waste": None}
                notes.append(f"no prediction: {e}")
            return {"interval_steps": every, "persist_every_steps": every * k, "persist_every_k": k, "model": "tiered",
                    **at, "notes": notes}
        every = a.interval
        if every is None:
            every = self._whole_steps(name, costs, plan.single(**self._model(name, costs, m))["optimum_seconds"] / t, None)[0]
        return {"interval_steps": every, "persist_every_steps": None, "model": "single",
                "waste": self._waste(name, costs, every, None, m)["waste"], "notes": notes}

    def why(self, entry: dict, ratio: float) -> str:
        """Where a measured goodput and the plan's part: each input of the model against what the run saw."""
        m, costs = entry["measured"], entry["costs"]
        tiered = entry["name"] in _job.TIERED
        stall = costs["capture_stall"] if tiered else costs["stall"]
        restart = costs["restart"]
        parts = [f"{m['failures']} failures in {m['wall_s']:.0f} s (the model expects {m['wall_s'] / entry['predicted_mtbf_s']:.1f}, "
                 f"the schedule's rate over the predicted run)"]
        if tiered and entry.get("predicted_mix"):
            mix = entry["predicted_mix"]
            parts.append("predicted with the shares crash/node/power " + "/".join(f"{mix[k]:.2f}" for k in ("crash", "node", "power")) +
                         ", met " + "/".join(str(m["failures_by_kind"].get(k, 0)) for k in ("crash", "node", "power")))
        if m["mean_to_first_step_s"] is not None:
            parts.append(f"failure to first new step {m['mean_to_first_step_s']:.2f} s on average (planned restart "
                         f"{restart:.2f} s{' from memory' if tiered else ''})")
        if m["saves"]:
            parts.append(f"{m['blocked_s'] / m['saves']:.2f} s blocked per save (planned {stall:.2f} s + "
                         f"{costs['interference']:.2f} s interference)")
        parts.append(f"steps trained {entry['compute_slowdown']:+.0%} slower than the ideal run's")
        return f"measured goodput is {ratio:.2f}x ckpt-plan's prediction: " + "; ".join(parts)

    # --- the run -----------------------------------------------------------------------------------
    def run(self) -> dict:
        a = self.args
        doc = {"command": "python -m ckpt.goodput " + " ".join(shlex.quote(x) for x in sys.argv[1:]), "contenders": []}
        timelines = {}
        # The ideal run: no checkpoints, no failures; its time is what every contender is measured by.
        self.limit = a.limit or 1e9
        self.progress(f"ideal: {a.steps} steps, {a.world} ranks, {_job.state_bytes(a.hidden, self.layers) / (1 << 30):.2f} GiB of state")
        cfg = self.config("ideal", "run")
        _sup.run_job(cfg, self.model, self.logs, self.limit)
        events = _sup.read_events(cfg.events)
        ideal = _report.measure(events, a.steps)
        self.step_s = _cal.median([e["compute"] for e in events if e["ev"] == "step"])
        self.ideal_wall = ideal["wall_s"]
        first_step = next(e for e in events if e["ev"] == "step")
        self.startup = first_step["t"] - first_step["compute"] - events[0]["t"]
        self.limit = a.limit or 8 * self.ideal_wall + 120
        self.mtbf = a.mtbf or self.ideal_wall / a.failures
        schedule = _sup.failure_schedule(a.seed, self.mtbf, a.mix, a.world, a.nodes, horizon=self.limit)
        timelines["ideal"] = _report.timeline(events)
        doc["contenders"].append({"name": "ideal", "label": _job.LABELS["ideal"], "goodput": 1.0, "measured": ideal,
                                  "bit_identical": True})
        self.progress(f"ideal: {self.ideal_wall:.1f} s ({self.step_s:.3f} s a step); MTBF {self.mtbf:.1f} s")
        code = 0
        for name in a.contenders[1:]:
            entry = {"name": name, "label": _job.LABELS[name], "verified_loads": name in _job.VERIFIED}
            doc["contenders"].append(entry)
            try:
                self.progress(f"{name}: calibrating")
                entry["costs"] = self.calibrate(name)
                entry.update(self.plan(name, entry["costs"]))
                cfg = self.config(name, "run", interval=entry["interval_steps"],
                                  persist_every=entry["persist_every_steps"] or 0)
                self.clean(cfg)
                self.progress(f"{name}: running with failures (interval {entry['interval_steps']} steps)")
                _sup.run_job(cfg, self.model, self.logs, self.limit, schedule, first_attempt=100)
                events = _sup.read_events(cfg.events)
                m = _report.measure(events, a.steps)
                entry["measured"] = m
                timelines[name] = _report.timeline(events)
                entry["goodput"] = self.ideal_wall / m["wall_s"]
                self.predict(entry, schedule)
                entry["bit_identical"] = m["digest"] is not None and m["digest"] == ideal["digest"] and bool(m["ranks_agree"])
                entry["compute_slowdown"] = m["compute_s"] / max(1e-9, m["steps_executed"] * self.step_s) - 1
                entry["lost"] = _report.lost_time(m, ideal, self.step_s)
                ratio = entry["goodput"] / entry["predicted_goodput"] if entry["predicted_goodput"] else None
                if ratio is not None and not 0.8 <= ratio <= 1.2:
                    entry["notes"].append(self.why(entry, ratio))
                if name in _job.VERIFIED and not entry["bit_identical"]:
                    code = 1
                self.clean(cfg)
                self.progress(f"{name}: goodput {entry['goodput']:.3f} (predicted {entry['predicted_goodput']:.3f}), "
                              f"{m['failures']} failures, {m['steps_recomputed']} steps recomputed")
            except Exception as e:  # one contender's failure is reported, the others still run
                entry["error"] = f"{type(e).__name__}: {e}"
                code = 1
                self.progress(f"{name}: FAILED: {entry['error'][:2000]}")
        doc["tiers_lost_vs_best_other"] = _report.tiers_against_best_other(doc["contenders"], _job.TIERED)
        doc["setting"] = {
            "world": a.world, "nodes": a.nodes, "hidden": a.hidden, "layers": self.layers,
            "state_gib": _job.state_bytes(a.hidden, self.layers) / (1 << 30), "state_bytes": _job.state_bytes(a.hidden, self.layers),
            "steps": a.steps, "batch": a.batch, "step_s": self.step_s, "ideal_wall_s": self.ideal_wall, "startup_s": self.startup,
            "seed": a.seed, "mtbf_s": self.mtbf, "mix": a.mix, "failures_scheduled": len(schedule),
            "schedule": [{"at": f.at, "kind": f.kind, "victim": f.victim} for f in schedule if f.at < 3 * self.ideal_wall],
            "device": self.device, "machine": machine(),
            "profile": a.profile if a.profile == "cpu" or self.device != "cpu" else
            f"accelerator, emulated: each step waits {a.device_step:g} s of device time with the host's cores free",
            "storage": f"{self.root} on {_mount_of(self.root)}, " +
            (f"through a link of {a.storage_gbps:g} GB/s per node that its ranks share" if a.storage_gbps > 0 else
             "this machine's speed (no bandwidth limit)") + ", the same for every contender",
            "storage_gbps": a.storage_gbps,
            "memory": f"{self.memory} on {_mount_of(self.memory)}",
            "restart": "ranks forked from a supervisor that has imported torch and built the initial model (a warm agent)",
            "fixed_interval": a.interval,
        }
        doc["exit_code"] = code
        if a.plot:
            _report.plot(doc, timelines, a.plot)
        return doc

    def close(self) -> None:
        shutil.rmtree(self.memory, ignore_errors=True)
        if not self.args.keep and self.own_root:
            shutil.rmtree(self.root, ignore_errors=True)


def main(argv=None) -> int:
    args = arguments(argv)
    bench = Bench(args)
    try:
        doc = bench.run()
    finally:
        bench.close()
    if args.json:
        text = json.dumps(doc, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    if args.json != "-":
        print(_report.table(doc))
    return doc["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
