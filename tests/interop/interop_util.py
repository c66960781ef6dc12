"""What the interop scripts (tests/interop/test_*.py) share: one tally of checks, the tools run as
subprocesses, the exit statuses ctest reads (cmake/tests-*.cmake: SKIP_RETURN_CODE 77).

ctest runs each script by its path, so Python puts this directory first on sys.path; a script also
inserts it itself before `import interop_util`, so it runs from anywhere (and under PYTHONSAFEPATH).

    from interop_util import check, finish, run, skip
    try:
        import xxhash
    except ImportError as e:
        skip("Python oracle missing: %s" % e)
    ...
    check(rc == 0, "ckpt-verify exits 0 (got %d)" % rc)
    ...
    sys.exit(finish())
"""
import hashlib
import json
import os
import subprocess
import sys

SKIPPED = 77  # ctest's SKIP_RETURN_CODE: an oracle package is not installed

failures = []  # the description of every failed check, in order
checks = 0
_print_passes = True


def only_failures():
    """From now on print failed checks only (for oracles that make thousands of checks)."""
    global _print_passes
    _print_passes = False


def check(condition, what):
    """Counts one check; prints it ("ok    what" or "FAIL  what") and records a failure. Returns
    condition, so that a check can guard what depends on it: `if not check(...): return`."""
    global checks
    checks += 1
    if not condition:
        failures.append(what)
        print("FAIL  " + what)
    elif _print_passes:
        print("ok    " + what)
    return condition


def finish():
    """Prints the tally; the script's exit status: 0 every check passed, 1 one failed."""
    print("%d checks, %d failed" % (checks, len(failures)))
    return 1 if failures else 0


def skip(why):
    """Exits as skipped (SKIPPED), not passed: ctest reports it so."""
    print("skipped: " + why)
    sys.exit(SKIPPED)


def built(*tools):
    """One check per tool that it exists (the tests run the tools as built); True when all do."""
    return all([check(os.path.exists(t), "%s is built" % t) for t in tools])


def run(tool, *args, env=None):
    """Runs tool with args (made strings); returns (exit status, stdout, stderr), decoded as UTF-8."""
    p = subprocess.run([tool] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def run_json(tool, *args):
    """run() for a tool that prints JSON: (exit status, the parsed document or None, stderr, plus
    stdout when it was not JSON)."""
    rc, out, err = run(tool, *args)
    try:
        return rc, json.loads(out), err
    except ValueError:
        return rc, None, err + out


def flip_byte(path, offset, mask):
    """XORs the byte at offset of the file at path with mask, in place."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ mask]))


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_safetensors(path):
    """What the reference implementation (PyPI safetensors) sees: {name: (dtype, shape, bytes)} and __metadata__."""
    import safetensors
    from safetensors import safe_open

    with open(path, "rb") as f:
        content = f.read()
    tensors = {name: (v["dtype"], list(v["shape"]), bytes(v["data"])) for name, v in safetensors.deserialize(content)}
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
    return tensors, metadata
