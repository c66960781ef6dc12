#!/usr/bin/env python3
"""The crash oracle of a store on objects with a real process (spec/OBJECT.md 6, G2): a writer killed by
SIGKILL at every request boundary of a save, and of a save whose retention retires a step.

Runs under `tools/s3-test-server.py --server moto --proxy run -- python3 tests/test_s3_crash.py --writer
build/s3_crash_writer --tools build` (ctest s3_crash_moto), with S3_UPLOAD_PART_MIN_SIZE=65536 so that moto
takes the writer's 64 KiB parts. The writer (tests/s3_crash_writer.cpp) saves steps whose bytes follow from
the step number; the fault proxy (tools/s3-fault-proxy.py) kills it.

For each scenario the requests of one save are first counted through the proxy (no fault). Then for every
request k of that save, twice: action `kill` (SIGKILL when request k arrives, before it is forwarded) and
`kill_after` (request k forwarded and answered by the server, SIGKILL before the answer is returned):

  1. a writer in a fresh prefix commits the earlier steps, says "ready", and waits; the kill rule is armed
     with its pid, counting from then; it saves the next step and must die by SIGKILL at request k, the
     proxy's log showing exactly k requests, the last the same kind of request as in the counted save;
  2. through the server directly (no proxy): the writer's checker lists the steps: exactly the earlier
     ones plus the new one when (and only when) its commit PUT reached the server, minus the retired one
     when its retire PUT reached the server; every listed step reads back bit for bit, every chunk
     verified; no log object is damaged;
  3. `ckpt-inspect --json` lists the same steps; `ckpt-verify --json URL` exits 0, every step verified;
  4. `ckpt-repair --json URL` (garbage collection) exits 0, removes exactly the objects of the retired step
     that its interrupted deletes left (nothing under a committed step), aborts no upload, and keeps the
     killed save's transaction when anything of it reached the server (no commit or abort proves it dead);
  5. a new writer commits the next step, and the checker finds every step of 2 plus it, bit for bit.

Everything missing (environment, programs, an unexpected count) fails the test; nothing is skipped.
"""
import argparse
import json
import os
import random
import re
import select
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

TIMEOUT_S = 60  # one program's run; the whole test is bounded by ctest's TIMEOUT

# name, steps saved before the killed save, the step it saves, retention (keep_last)
SCENARIOS = [
    ("save", [1], 2, 0),
    ("retention", [1, 2], 3, 2),
]


class Failure(Exception):
    pass


def need_env(name):
    value = os.environ.get(name)
    if not value:
        raise Failure(f"{name} is not set: run under tools/s3-test-server.py --server moto --proxy (ctest -L object does)")
    return value


# --- the proxy's control API ---------------------------------------------------------------------------

def control(method, path, body=None):
    request = urllib.request.Request(need_env("CKPT_S3_PROXY_CONTROL") + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=10) as answer:
        if answer.status != 200:
            raise Failure(f"{method} {path} on the proxy's control API: HTTP {answer.status}")
        return answer.read()


def request_log():
    return sorted(json.loads(control("GET", "/log?json=1")), key=lambda e: e["seq"])


def describe(entry):
    """A request's kind, the same in every run: the key relative to the store, transaction ids replaced."""
    path = urllib.parse.unquote(entry["path"])
    key = path.split("/", 3)[3] if path.count("/") >= 3 else ""  # /bucket/<prefix>/key; "" for a LIST
    key = re.sub(r"step-(\d+)-\d+", r"step-\1-T", key)
    key = re.sub(r"(\d{20})-\d{20}", r"\1-T", key)
    params = urllib.parse.parse_qs(entry["query"], keep_blank_values=True)
    query = ",".join(sorted(params))
    if "prefix" in params:
        query += "=" + re.sub(r"step-(\d+)-\d+", r"step-\1-T", params["prefix"][0].split("/", 1)[-1])
    return f"{entry['method']} /{key}" + (f"?{query}" if query else "")


def is_put_of(entry, suffix):
    return entry["method"] == "PUT" and not entry["query"] and entry["path"].endswith(suffix)


# --- programs ----------------------------------------------------------------------------------------

class Programs:
    def __init__(self, writer, tools):
        self.writer = writer
        self.tools = tools
        for program in [writer] + [os.path.join(tools, t) for t in ("ckpt-inspect", "ckpt-verify", "ckpt-repair")]:
            if not (os.path.isfile(program) and os.access(program, os.X_OK)):
                raise Failure(f"{program} is missing: build it (cmake --build build --target s3_crash_writer)")
        proxied = dict(os.environ)
        direct = dict(os.environ)
        direct["AWS_ENDPOINT_URL"] = need_env("CKPT_S3_DIRECT_ENDPOINT")
        self.proxied_env, self.direct_env = proxied, direct

    def run(self, args):
        """A program straight against the server; (exit status, stdout)."""
        done = subprocess.run(args, env=self.direct_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=TIMEOUT_S)
        return done.returncode, done.stdout

    def tool(self, name, *args):
        return self.run([os.path.join(self.tools, name)] + list(args))

    def check(self, url):
        """The committed steps, as the writer's checker lists them; fails on any difference or damage."""
        code, out = self.run([self.writer, "check", url])
        lines = out.splitlines()
        if code != 0 or not lines or lines[-1] != "ok":
            raise Failure(f"the checker found damage or a difference (exit {code}):\n{out}")
        steps = [int(s) for s in lines[0].split()[1:]] if lines and lines[0].startswith("steps") else None
        if steps is None:
            raise Failure(f"the checker printed no steps:\n{out}")
        return steps

    def start_writer(self, url, earlier, step, keep):
        """A writer through the proxy that saved the earlier steps and waits before saving `step`."""
        args = [self.writer, "save", url, str(earlier[0]), str(step), "--keep", str(keep), "--wait"]
        process = subprocess.Popen(args, env=self.proxied_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, bufsize=0)
        out = b""
        deadline = time.monotonic() + TIMEOUT_S
        while not out.endswith(b"ready\n"):  # read unbuffered: a buffered reader would hide "ready" from select
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            piece = os.read(process.stdout.fileno(), 4096) if ready else b""
            if not piece:
                process.kill()
                process.wait()
                raise Failure(f"the writer did not get ready (exit {process.returncode}):\n{out.decode(errors='replace')}")
            out += piece
        return process, out.decode(errors="replace")

    @staticmethod
    def go(process, out):
        try:
            rest, _ = process.communicate(input=b"go\n", timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            rest, _ = process.communicate()
            raise Failure(f"the writer did not finish within {TIMEOUT_S} s:\n{out}{rest.decode(errors='replace')}")
        return process.returncode, out + rest.decode(errors="replace")


def fresh_url(base, what):
    return f"{base}crash{random.getrandbits(32)}-{what}"


# --- the oracle -------------------------------------------------------------------------------------

def count_requests(programs, base, scenario):
    """The requests of one save of the scenario, through the proxy with no fault, as described kinds."""
    name, earlier, step, keep = scenario
    url = fresh_url(base, f"{name}-count")
    process, out = programs.start_writer(url, earlier, step, keep)
    control("DELETE", "/rules")
    control("DELETE", "/log")
    code, output = programs.go(process, out)
    if code != 0:
        raise Failure(f"{name}: the counting save failed (exit {code}):\n{output}")
    log = request_log()
    expected = sorted(set(earlier + [step]))[-keep:] if keep else earlier + [step]
    if programs.check(url) != expected:
        raise Failure(f"{name}: after a clean save the steps are not {expected}")
    kinds = [describe(e) for e in log]
    commits = [i for i, e in enumerate(log) if is_put_of(e, ".commit")]
    retires = [i for i, e in enumerate(log) if is_put_of(e, ".retire")]
    parts = [e for e in log if "partNumber" in e["query"]]
    if len(commits) != 1 or len(retires) != (1 if keep else 0) or len(parts) < 2:
        raise Failure(f"{name}: the counted save is not one commit PUT, {1 if keep else 0} retire PUT and "
                      f"several parts:\n" + "\n".join(kinds))
    if any(e["action"] != "forward" or not 200 <= e["status"] < 300 for e in log):
        raise Failure(f"{name}: a request of the clean save failed:\n" + json.dumps(log, indent=1))
    return kinds, commits[0] + 1, (retires[0] + 1 if retires else None)


def boundary(programs, base, scenario, kinds, commit_at, retire_at, k, action):
    """The writer killed at request k (1-based) by `action`; returns whether the new step committed."""
    name, earlier, step, keep = scenario
    label = f"{name}: {action} at request {k} of {len(kinds)} ({kinds[k - 1]})"
    url = fresh_url(base, f"{name}-{k}-{action}")
    process, out = programs.start_writer(url, earlier, step, keep)
    control("PUT", "/rules", [{"action": action, "pid": process.pid, "skip": k - 1, "times": 1}])
    control("DELETE", "/log")
    code, output = programs.go(process, out)
    if code != -signal.SIGKILL:
        raise Failure(f"{label}: the writer was not killed by SIGKILL (exit {code}):\n{output}")
    # The kill is sent before the proxy records its request: wait for the record.
    deadline = time.monotonic() + 10
    while True:
        log = request_log()
        if any(e["action"] == action for e in log) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    control("DELETE", "/rules")
    got = [describe(e) for e in log]
    if (len(log) != k or log[-1]["action"] != action or got != kinds[:k]
            or any(e["action"] != "forward" or not 200 <= e["status"] < 300 for e in log[:-1])):
        raise Failure(f"{label}: the proxy's log is not the counted save's first {k} requests, the last killed:\n"
                      + "\n".join(f"{e['seq']} {describe(e)} -> {e['status']} {e['action']}" for e in log)
                      + "\ncounted:\n" + "\n".join(kinds))

    # 2. Exactly the steps the requests that reached the server decide, each bit for bit.
    reached = k if action == "kill_after" else k - 1  # requests the server acted on
    committed = commit_at <= reached
    retired = retire_at is not None and retire_at <= reached
    expected = sorted(set(earlier + ([step] if committed else [])) - ({earlier[0]} if retired else set()))
    steps = programs.check(url)
    if steps != expected:
        raise Failure(f"{label}: the committed steps are {steps}, not {expected} (commit PUT is request {commit_at}, "
                      f"retire PUT {retire_at})")

    # 3. ckpt-inspect agrees; ckpt-verify passes.
    for tool, keep, says in (("ckpt-inspect", lambda s: True, "list"), ("ckpt-verify", lambda s: s["ok"], "verify every step of")):
        code, out = programs.tool(tool, "--json", url)
        try:
            listed = sorted(s["step"] for s in json.loads(out)["steps"] if keep(s)) if code == 0 else None
        except (ValueError, KeyError, TypeError):
            listed = None
        if listed != expected:
            raise Failure(f"{label}: {tool} --json (exit {code}) does not {says} {expected}:\n{out}")

    # 4. Garbage collection removes exactly what the retired step's unfinished deletes left, nothing of a
    # committed step, and keeps the killed save's transaction (no commit or abort proves it dead, G4).
    code, out = programs.tool("ckpt-repair", "--json", url)
    try:
        repaired = json.loads(out) if code == 0 else None
        removed = sorted(re.sub(r"step-(\d+)-\d+", r"step-\1-T", key) for key in repaired["removed"])
        kept = [k.split(":")[0] for k in repaired["kept"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        repaired = None
    if repaired is None:
        raise Failure(f"{label}: ckpt-repair exit {code}:\n{out}")
    left = sorted(kind.split(" ", 1)[1][1:] for i, kind in enumerate(kinds, 1)
                  if retired and kind.startswith("DELETE /step-") and i > reached)
    killed_txn_exists = reached >= 1 and not committed
    if (removed != left or repaired["aborted_uploads"]
            or len(kept) != (1 if killed_txn_exists else 0) or any(not k.startswith(f"step-{step}-") for k in kept)):
        raise Failure(f"{label}: ckpt-repair removed {removed} and aborted {repaired['aborted_uploads']}, kept "
                      f"{kept}; expected to remove {left}, abort nothing and keep "
                      f"{'the killed save' if killed_txn_exists else 'nothing'}:\n{out}")

    # 5. The next save commits, and every step is still whole.
    following = step + 1
    code, out = programs.run([programs.writer, "save", url, str(following), str(following)])
    if code != 0:
        raise Failure(f"{label}: the next save (step {following}) failed (exit {code}):\n{out}")
    steps = programs.check(url)
    if steps != expected + [following]:
        raise Failure(f"{label}: after ckpt-repair and the next save the steps are {steps}, not {expected + [following]}")
    return committed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writer", required=True, help="tests/s3_crash_writer.cpp, built")
    parser.add_argument("--tools", required=True, help="the directory of ckpt-inspect, ckpt-verify and ckpt-repair")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        base = need_env("CKPT_S3_TEST_URL")
        need_env("CKPT_S3_PROXY_CONTROL")
        if os.environ.get("CKPT_S3_TEST_SERVER") != "moto":
            raise Failure("this oracle runs on moto (its 64 KiB parts need S3_UPLOAD_PART_MIN_SIZE=65536)")
        part_min = os.environ.get("S3_UPLOAD_PART_MIN_SIZE", "")
        if not part_min.isdigit() or int(part_min) > 65536:
            raise Failure("S3_UPLOAD_PART_MIN_SIZE must be at most 65536 in moto's environment (the writer's parts "
                          "are 64 KiB; cmake/tests-object.cmake sets it)")
        programs = Programs(args.writer, args.tools)
        outcomes = {}
        for scenario in SCENARIOS:
            kinds, commit_at, retire_at = count_requests(programs, base, scenario)
            print(f"{scenario[0]}: {len(kinds)} requests, commit PUT at {commit_at}"
                  + (f", retire PUT at {retire_at}" if retire_at else "") + ":\n  " + "\n  ".join(kinds), flush=True)
            # The save's own boundaries are covered by the plain save; retention's scenario adds its own.
            first = 1 if retire_at is None else commit_at + 1
            for k in range(first, len(kinds) + 1):
                for action in ("kill", "kill_after"):
                    committed = boundary(programs, base, scenario, kinds, commit_at, retire_at, k, action)
                    outcomes[(scenario[0], k, action)] = committed
                    print(f"  {scenario[0]} {action:10} at {k:2} ({kinds[k - 1]}): "
                          f"{'new step committed' if committed else 'last commit kept'}", flush=True)
        old = sum(1 for c in outcomes.values() if not c)
        if old == 0 or old == len(outcomes):
            raise Failure("every boundary ended the same way: the kills did not straddle the commit point")
        print(f"test_s3_crash: {len(outcomes)} boundaries, each killed by SIGKILL and judged "
              f"({old} kept the last commit, {len(outcomes) - old} committed the new step), "
              f"{time.monotonic() - started:.1f} s")
        return 0
    except (Failure, OSError, subprocess.SubprocessError) as exc:
        print(f"test_s3_crash: FAILED: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
