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


def _load_test_server():
    """tools/s3-test-server.py as a module (its name has dashes)."""
    import importlib.util

    path = os.path.join(HERE, "..", "..", "tools", "s3-test-server.py")
    spec = importlib.util.spec_from_file_location("ckpt_s3_test_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on 127.0.0.1 for the session (tools/s3-test-server.py), its AWS_* variables set in this
    process and the ranks it starts. A missing server or an extension built without the S3 client fails the
    test: tools/install-deps.sh installs both (spec/OBJECT.md 2)."""
    import ckpt

    if not ckpt._ckpt.HAVE_S3:
        pytest.fail("ckpt._ckpt was built without the S3 client (libcurl4-openssl-dev, libpugixml-dev, zlib1g-dev: "
                    "run tools/install-deps.sh, then reinstall ./python)")
    module = _load_test_server()
    server = module.Server("moto", None)
    server.start()
    saved = {k: os.environ.get(k) for k in server.environment()}
    os.environ.update(server.environment())
    try:
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_url(s3_server):
    """A fresh prefix of the test bucket: s3://ckpt-test/<random>/ (nothing else is under it)."""
    import uuid

    return f"{os.environ['CKPT_S3_TEST_URL']}{uuid.uuid4().hex}"
