#!/usr/bin/env python3
"""The interpreter that runs this is the repository's pinned environment: a virtual environment holding
exactly the versions of tools/constraints.txt and nothing unpinned, with moto_server and weed beside it
(docs/dependencies.md). tools/install-deps.sh runs it on the environment it made; ctest
python_env_pinned on the interpreter the tests run. With CKPT_DEPS=latest (install-deps.sh --latest,
tests/run.sh --latest) it prints the drift and exits 77 (skipped): that environment is meant to differ.

  check-python-env.py CONSTRAINTS
"""
import importlib.metadata
import os
import re
import sys


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def main():
    constraints = {}
    with open(sys.argv[1]) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
            if not match:
                print(f"{sys.argv[1]}:{number}: not an exact pin 'name==version': {line!r}")
                return 1
            constraints[canonical(match.group(1))] = match.group(2)
    installed = {canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    problems = []
    if sys.prefix == sys.base_prefix:
        problems.append(f"{sys.executable} is not a virtual environment (configure with -DPython3_EXECUTABLE=build/venv/bin/python)")
    for name, version in sorted(constraints.items()):
        if installed.get(name) != version:
            problems.append(f"{name}: pinned {version}, installed {installed.get(name, '(none)')}")
    for name, version in sorted(installed.items()):
        if name not in constraints and name not in ("pip", "ckpt"):
            problems.append(f"{name} {version}: installed without a pin")
    bin_dir = os.path.dirname(sys.executable)
    for program in ("moto_server", "weed"):
        if not os.access(os.path.join(bin_dir, program), os.X_OK):
            problems.append(f"{program} is not in {bin_dir}")
    if os.environ.get("CKPT_DEPS") == "latest":
        print(f"{sys.executable}: the newest versions (tests/run.sh --latest); differences from the constraints:")
        print("\n".join("  " + p for p in problems) or "  none")
        return 77
    if problems:
        print(f"{sys.executable} is not the pinned environment of {sys.argv[1]}:")
        print("\n".join("  " + p for p in problems))
        return 1
    print(f"{sys.executable}: {len(constraints)} packages, each at its pinned version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
