"""Shared fixtures: the ckpt-* tools of a build (CKPT_BIN, default ../../build) and file damage."""

import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("CKPT_BIN", os.path.join(HERE, "..", "..", "build"))


def tool(name):
    path = os.path.join(BIN, name)
    if not os.access(path, os.X_OK):
        path = shutil.which(name)
    return path


@pytest.fixture
def run_tool():
    """Runs a ckpt-* tool; skips the test when the tools are not built (CKPT_BIN)."""

    def run(name, *args, check=None):
        path = tool(name)
        if path is None:
            pytest.skip(f"{name} is not built (set CKPT_BIN to a build directory)")
        p = subprocess.run([path, *map(str, args)], capture_output=True, text=True)
        if check is not None:
            assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
        return p

    return run


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
