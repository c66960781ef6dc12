"""What a run's event log says: goodput, rework, blocking, recoveries, bit-identity; the text table and
the plot (one timeline per contender, and goodput bars)."""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Set


def measure(events: List[dict], steps: int) -> dict:
    """The metrics of one contender's run with failures, from its event log."""
    if not events or events[0]["ev"] != "launch":
        raise ValueError("event log does not start with a launch")
    t0 = events[0]["t"]
    trained = [e for e in events if e["ev"] == "trained" and e.get("step") == steps]
    done = [e for e in events if e["ev"] == "done"]
    step_events = [e for e in events if e["ev"] == "step"]
    save_events = [e for e in events if e["ev"] == "save"]
    failures = [e for e in events if e["ev"] == "failure"]
    end = trained[-1]["t"] if trained else None
    # One pass in time order: the progress of the timeline (next step to run), rolled back at each load.
    recoveries: List[dict] = []
    progress, open_recs = 0, []
    # What a failure cut off (the work in progress since the last step, save or load ended: training, or a
    # save that began at `saving`), the first launch's start-up (to its `loaded`, or the failure that ended
    # it) and the recoveries (a failure to the `loaded` of the launch that then trains; failures in between
    # are one recovery).
    last_end, saving_since = t0, None
    cut_off = {"training": 0.0, "save": 0.0}
    recovery_s = 0.0
    startup_s = None
    down_since = t0  # not training since (start-up or a recovery); None while training
    for e in events:
        if e["ev"] == "step":
            progress = e["step"] + 1
            for rec in open_recs:
                rec["to_first_step_s"] = (e["t"] - e["compute"]) - rec["_t"]
                rec["interrupted"] = rec is not open_recs[-1]  # a later failure came before any step
            open_recs = []
            last_end, saving_since = e["t"], None
        elif e["ev"] == "saving":
            saving_since = e["t"]
        elif e["ev"] == "save":
            last_end, saving_since = e["t"], None
        elif e["ev"] == "failure":
            if down_since is None:
                if saving_since is not None:
                    cut_off["save"] += e["t"] - saving_since
                cut_off["training"] += (saving_since if saving_since is not None else e["t"]) - last_end
                down_since = e["t"]
            elif startup_s is None:
                startup_s, down_since = e["t"] - t0, e["t"]
            rec = {"kind": e["kind"], "at": e["t"] - t0, "victim": e.get("victim"), "interrupted": True, "_t": e["t"]}
            recoveries.append(rec)
            open_recs.append(rec)
        elif e["ev"] == "ready" and open_recs:
            open_recs[-1]["restart_s"] = e["t"] - open_recs[-1]["_t"]
            open_recs[-1]["_ready"] = e["t"]
            if "entered" in e:  # the restart's parts: to the new process, its process group, model, contender
                open_recs[-1]["restart_parts_s"] = {"reap_fork": e["entered"] - open_recs[-1]["_t"], "group": e["group_s"],
                                                    "model": e["model_s"], "contender": e["contender_s"]}
        elif e["ev"] == "loaded":
            if startup_s is None:
                startup_s = e["t"] - t0
            elif down_since is not None:
                recovery_s += e["t"] - down_since
            down_since, last_end, saving_since = None, e["t"], None
            if not open_recs:
                continue
            rec = open_recs[-1]
            rec["resumed_step"] = e["next_step"]
            rec["source"] = e.get("source")
            for key in ("memory_steps", "storage_steps", "evidence_error"):  # the tiers: what each tier held just before the resume
                if key in e:
                    rec[key] = e[key]
            if "_ready" in rec:
                rec["load_s"] = e["t"] - rec["_ready"]
            rec["lost_steps"] = rec.get("lost_steps", 0) + progress - e["next_step"]
            progress = e["next_step"]
    for rec in recoveries:
        rec.setdefault("lost_steps", 0)
        rec.pop("_t", None)
        rec.pop("_ready", None)
    executed = len(step_events)
    out = {
        "completed": end is not None,
        "wall_s": None if end is None else end - t0,
        "failures": len(failures),
        "failures_by_kind": {k: sum(1 for f in failures if f["kind"] == k) for k in ("crash", "node", "power")},
        "steps_executed": executed,
        "steps_recomputed": executed - steps,
        "saves": sum(1 for e in save_events if not e.get("skipped")),
        "skips": sum(1 for e in save_events if e.get("skipped")),  # captures the tiers did not take (when_busy skip)
        "blocked_s": sum(e["seconds"] for e in save_events),
        "compute_s": sum(e["compute"] for e in step_events),
        "startup_s": startup_s,
        "cut_off_s": cut_off,
        "recovery_s": recovery_s,
        "recoveries": recoveries,
        "digest": done[-1].get("digest") if done else None,
        "ranks_agree": done[-1].get("ranks_agree") if done else None,
    }
    # The most steps one failure of each kind made the job train again (a memory interval is the bound the
    # tiers aim at for crashes and node losses, a persist interval for power losses).
    out["max_lost_steps"] = {k: max([r["lost_steps"] for r in recoveries if r["kind"] == k], default=None)
                             for k in ("crash", "node", "power")}
    done_recoveries = [r for r in recoveries if not r["interrupted"]]
    for key in ("restart_s", "load_s", "to_first_step_s"):
        vals = [r[key] for r in done_recoveries if key in r]
        out[f"mean_{key}"] = statistics.fmean(vals) if vals else None
    parts = [r["restart_parts_s"] for r in done_recoveries if "restart_parts_s" in r]
    out["mean_restart_parts_s"] = {k: statistics.fmean(p[k] for p in parts) for k in parts[0]} if parts else None
    return out


def lost_time(m: dict, ideal: dict, step_s: float) -> dict:
    """Where a contender's lost time (its wall time over the ideal run's, whose ``measure`` is ``ideal``)
    went, in seconds. The parts are measured; ``other`` is the rest (the gaps between events). ``floor``
    is what no checkpoint removes from a job that restarts every process at each failure, as this one does:
    the training a failure cut off, and each restart without the contender's own setup (the new process, its
    process group, the model and optimizer)."""
    # Every restart that reached `ready` and every load that ended, also those a later failure interrupted.
    ready = [r for r in m["recoveries"] if "restart_s" in r]
    setup = sum(r["restart_parts_s"]["contender"] for r in ready if "restart_parts_s" in r)
    restart = sum(r["restart_s"] for r in ready)
    load = sum(r.get("load_s", 0.0) for r in ready)
    parts = {
        "startup": m["startup_s"] - ideal["startup_s"],  # the first launch's, against the ideal run's
        "blocked": m["blocked_s"],
        "slower": m["compute_s"] - m["steps_executed"] * step_s,  # steps trained slower than the ideal run's median
        "recomputed": m["steps_recomputed"] * step_s,
        "cut_off_training": m["cut_off_s"]["training"],
        "cut_off_save": m["cut_off_s"]["save"],
        "restart": restart - setup,
        "setup": setup,
        "load": load,
        "recovery_other": m["recovery_s"] - restart - load,  # restarts and loads a later failure cut short
    }
    lost = m["wall_s"] - ideal["wall_s"]
    parts["other"] = lost - sum(parts.values())
    floor = parts["cut_off_training"] + parts["restart"]
    return {"lost_s": lost, "parts_s": parts, "floor_s": floor, "above_floor_s": lost - floor}


def tiers_against_best_other(contenders: List[dict], tiered: Set[str]) -> Optional[dict]:
    """The issue's accelerator target, measured: the best tiered contender's lost time over the best other
    contender's (the least lost of those that finished), and the same above each one's floor."""
    ran = [c for c in contenders if c.get("lost") and not c.get("error")]
    tiers = min((c for c in ran if c["name"] in tiered), key=lambda c: c["lost"]["lost_s"], default=None)
    other = min((c for c in ran if c["name"] not in tiered), key=lambda c: c["lost"]["lost_s"], default=None)
    if tiers is None or other is None:
        return None
    def ratio(key: str) -> Optional[float]:
        return tiers["lost"][key] / other["lost"][key] if other["lost"][key] > 0 else None

    return {"tiers": tiers["name"], "other": other["name"], "lost_ratio": ratio("lost_s"),
            "above_floor_ratio": ratio("above_floor_s")}


def timeline(events: List[dict]) -> dict:
    """Segments for the plot, in seconds from the first launch: work, saves, recoveries; failure times."""
    t0 = events[0]["t"]
    work, saves, recover, fails = [], [], [], []
    last_failure = None
    for e in events:
        if e["ev"] == "step":
            start = e["t"] - e["compute"]
            if last_failure is not None:
                recover.append((last_failure - t0, start - last_failure))
                last_failure = None
            work.append((start - t0, e["compute"]))
        elif e["ev"] == "save":
            saves.append((e["t"] - e["seconds"] - t0, e["seconds"]))
        elif e["ev"] == "failure":
            fails.append((e["t"] - t0, e["kind"]))
            if last_failure is None:
                last_failure = e["t"]
    return {"work": work, "saves": saves, "recoveries": recover, "failures": fails}


def _fmt(v, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def table(doc: dict) -> str:
    """The text report: one row per contender, then the setting."""
    rows = []
    head = (f"{'contender':<34}{'goodput':>8}{'plan':>7}{'fails':>6}{'recomp':>7}{'blocked':>9}{'saves':>6}{'skips':>6}"
            f"{'restart':>8}{'load':>7}{'interval':>10}{'lost c/n/p':>12}  bit-identical")
    rows.append(head)
    rows.append("-" * len(head))
    for c in doc["contenders"]:
        m = c.get("measured") or {}
        if c.get("error"):
            rows.append(f"{c['name']:<34}  FAILED: {c['error'].splitlines()[0][:80]}")
            continue
        interval = "-" if c["name"] == "ideal" else \
            f"{c['interval_steps']}/{c['persist_every_steps']}" if c["name"] in ("ckpt_tiered", "ckpt_tiered_parity") else str(c["interval_steps"])
        lost = "/".join("-" if v is None else str(v) for v in (m.get("max_lost_steps") or {}).values()) or "-"
        ident = "reference" if c["name"] == "ideal" else ("yes" if c.get("bit_identical") else "NO")
        if c.get("verified_loads"):
            ident += ", loads verified"
        rows.append(f"{c['name']:<34}{_fmt(c.get('goodput'), '.3f'):>8}{_fmt(c.get('predicted_goodput'), '.3f'):>7}"
                    f"{m.get('failures', 0):>6}{m.get('steps_recomputed', 0):>7}{_fmt(m.get('blocked_s'), '.1f'):>8}s"
                    f"{m.get('saves', 0):>6}{m.get('skips', 0):>6}{_fmt(m.get('mean_restart_s'), '.2f'):>7}s{_fmt(m.get('mean_load_s'), '.2f'):>6}s"
                    f"{interval:>10}{lost:>12}  {ident}")
    s = doc["setting"]
    rows.append("")
    rows.append(f"job: {s['world']} ranks on {s['nodes']} nodes, {s['state_gib']:.2f} GiB of state (MLP {s['layers']}x{s['hidden']}, "
                f"AdamW), {s['steps']} steps of {s['step_s']:.3f} s; device {s['device']}; profile {s.get('profile', 'cpu')}")
    rows.append(f"failures: seed {s['seed']}, MTBF {s['mtbf_s']:.1f} s, mix " +
                ", ".join(f"{k} {v:g}" for k, v in s["mix"].items()) + f"; {s['failures_scheduled']} scheduled")
    rows.append(f"persistent storage: {s['storage']}; memory tier: {s['memory']}")
    rows.append("goodput = ideal wall time / wall time; plan = ckpt-plan's prediction (ckpt.plan) from the calibrated costs and the schedule's failure rate (tiered: and kinds) over the predicted run; "
                "interval = steps between saves (tiered: memory/persist); skips = captures not taken, the previous "
                "still in the background; "
                "lost c/n/p = most steps one crash / node loss / power loss made the job train again")
    for c in doc["contenders"]:
        parts = (c.get("measured") or {}).get("mean_restart_parts_s")
        if parts:
            rows.append(f"restart ({c['name']}, mean): failure to the new process {parts['reap_fork']:.2f} s (kill, reap, fork), "
                        f"process group {parts['group']:.2f} s, model and optimizer {parts['model']:.2f} s, "
                        f"the contender's setup {parts['contender']:.2f} s")
    for c in doc["contenders"]:
        lt = c.get("lost")
        if lt:
            p = lt["parts_s"]
            rows.append(f"lost ({c['name']}): {lt['lost_s']:.1f} s = start-up {p['startup']:+.1f} + blocked {p['blocked']:.1f} "
                        f"+ slower steps {p['slower']:.1f} + recomputed {p['recomputed']:.1f} + cut off: training "
                        f"{p['cut_off_training']:.1f}, saves {p['cut_off_save']:.1f} + restarts less setup {p['restart']:.1f} + setup "
                        f"{p['setup']:.1f} + loads {p['load']:.1f} + restarts and loads cut short {p['recovery_other']:.1f} "
                        f"+ other {p['other']:.1f}; floor {lt['floor_s']:.1f} s, above it {lt['above_floor_s']:.1f} s")
    t = doc.get("tiers_lost_vs_best_other")
    if t:
        rows.append(f"lost time, {t['tiers']} against the best other ({t['other']}): {_fmt(t['lost_ratio'], '.2f')}x "
                    f"(the accelerator profile's target: <= 0.5x); above the floor {_fmt(t['above_floor_ratio'], '.2f')}x. "
                    "floor = training cut off by failures + restarts without the contender's setup (new process, process "
                    "group, model and optimizer): no checkpoint removes it")
    for c in doc["contenders"]:
        for note in c.get("notes", []):
            rows.append(f"note ({c['name']}): {note}")
    return "\n".join(rows)


def plot(doc: dict, timelines: Dict[str, dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [c["name"] for c in doc["contenders"] if c["name"] in timelines]
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(12, 2.0 + 0.7 * len(names) + 3),
                                 gridspec_kw={"height_ratios": [max(2, len(names)), 3]})
    for i, name in enumerate(names):
        tl = timelines[name]
        y = len(names) - 1 - i
        ax.broken_barh(tl["work"], (y - 0.3, 0.6), facecolors="tab:green", label="training" if i == 0 else None)
        ax.broken_barh(tl["saves"], (y - 0.3, 0.6), facecolors="tab:orange", label="blocked by save" if i == 0 else None)
        ax.broken_barh(tl["recoveries"], (y - 0.3, 0.6), facecolors="tab:gray", label="recovery" if i == 0 else None)
        for t, kind in tl["failures"]:
            ax.plot([t, t], [y - 0.45, y + 0.45], color={"crash": "red", "node": "purple", "power": "black"}[kind], lw=1.2)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(list(reversed(names)))
    ax.set_xlabel("seconds since the first launch (vertical lines: failures; red crash, purple node loss, black power loss)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    goodput = {c["name"]: c.get("goodput") or 0 for c in doc["contenders"]}
    predicted = {c["name"]: c.get("predicted_goodput") for c in doc["contenders"]}
    colors = ["tab:blue" if (c["name"] == "ideal" or c.get("bit_identical")) else "red" for c in doc["contenders"]]
    xs = list(range(len(doc["contenders"])))
    bx.bar(xs, [goodput[c["name"]] for c in doc["contenders"]], color=colors)
    for x, c in zip(xs, doc["contenders"]):
        p = predicted[c["name"]]
        if p is not None:
            bx.plot([x - 0.4, x + 0.4], [p, p], color="black", lw=1.5)
        bx.text(x, goodput[c["name"]] + 0.01, f"{goodput[c['name']]:.3f}", ha="center", fontsize=8)
    bx.set_xticks(xs)
    bx.set_xticklabels([c["name"] for c in doc["contenders"]], fontsize=8)
    bx.set_ylabel("goodput (bars; red: not bit-identical)\nblack line: ckpt-plan's prediction")
    bx.set_ylim(0, 1.1)
    s = doc["setting"]
    fig.suptitle(f"Goodput under failures: {s['world']} ranks, {s['state_gib']:.2f} GiB state, MTBF {s['mtbf_s']:.0f} s, "
                 f"seed {s['seed']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
