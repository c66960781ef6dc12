#!/usr/bin/env bash
# Installs everything ckpt's build, tools and tests use: Debian packages through apt-get, and the Python
# packages of the tests, the demo and the benchmarks into a virtual environment of this repository's own,
# never into the system interpreter (docs/dependencies.md).
#
#   tools/install-deps.sh            build/venv, exactly the versions of tools/constraints.txt; reused while
#                                    the constraints, the requirements and the interpreter are unchanged
#   tools/install-deps.sh --latest   build/venv-latest, the newest of every package instead (to see upstream
#                                    drift before users do); prints what differs from the constraints
#   tools/install-deps.sh --freeze   writes build/venv-latest's versions into tools/constraints.txt
#   tools/install-deps.sh --debian   only the Debian packages (to build the library, or `pip install ./python`
#                                    into an environment of your own)
#
# CKPT_VENV names another environment; CKPT_PYTHON the interpreter that creates it (default python3).
# The callers (tools/demo.sh, tests/run.sh) put "$CKPT_VENV/bin" first on PATH afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=pinned
case "${1:-}" in
  "") ;;
  --latest) mode=latest ;;
  --freeze) mode=freeze ;;
  --debian) mode=debian ;;
  -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-deps.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac
requirements=tools/requirements.txt
constraints=tools/constraints.txt
pip_quiet=(-q --disable-pip-version-check --no-input)

if [ "$mode" = freeze ]; then
  latest=build/venv-latest
  [ -x "$latest/bin/python" ] || { echo "install-deps.sh: no $latest: run tools/install-deps.sh --latest (and tests/run.sh --latest) first" >&2; exit 2; }
  header=$(sed -n '/^#/p' "$constraints")
  { printf '%s\n' "$header"; "$latest/bin/python" -m pip freeze --all | grep -v -E '^(pip|ckpt)==|^-e |@ file:'; } > "$constraints.new"
  mv "$constraints.new" "$constraints"
  echo "install-deps.sh: wrote $(grep -c '==' "$constraints") versions from $latest into $constraints"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# clang and libclang-rt-dev: the libFuzzer targets of tests/fuzz (tools/fuzz.sh, the fuzz step of tests/run.sh).
# libcurl4-openssl-dev, libpugixml-dev, zlib1g-dev: the S3 client (HTTP and SigV4, XML, CRC32; spec/OBJECT.md 2).
# libgloo-dev: the tiers' transport between ranks, in C++ without the interpreter (spec/TIERS.md 4.7).
# libisal-dev: ISA-L's Reed-Solomon codes for the memory tier's parity groups (spec/TIERS.md 12).
PKGS="cmake g++ make libcli11-dev libxxhash-dev catch2 nlohmann-json3-dev libopenmpi-dev openmpi-bin xxd clang libclang-rt-dev libcurl4-openssl-dev libpugixml-dev zlib1g-dev libgloo-dev libisal-dev"
# python3, python3-venv and python3-dev: the interpreter the environment below is made from, on a machine
# that lacks it; Debian's python3 has no ensurepip without python3-venv, and no Python.h (which the Python
# package's extension is built against) without python3-dev.
python=${CKPT_PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  PKGS="$PKGS python3 python3-venv python3-dev ca-certificates"
else
  "$python" -c "import ensurepip, venv" >/dev/null 2>&1 || PKGS="$PKGS python3-venv"
  "$python" -c "import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" \
    >/dev/null 2>&1 || PKGS="$PKGS python3-dev"
fi
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "ckpt: installing Debian packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

[ "$mode" != debian ] || exit 0

if [ "$mode" = latest ]; then
  venv=${CKPT_VENV:-build/venv-latest}
else
  venv=${CKPT_VENV:-build/venv}
fi
# What the environment was made from: a change to any of these makes it anew.
stamp_text="mode=$mode
python=$("$python" -c 'import sys, platform; print(sys.version.split()[0], platform.machine())')
$(sha256sum "$requirements" "$constraints" | sed 's|  .*/|  |')"
if [ "$mode" = pinned ] && [ -f "$venv/.ckpt-stamp" ] && [ "$(cat "$venv/.ckpt-stamp")" = "$stamp_text" ] && [ -x "$venv/bin/python" ]; then
  exit 0  # made from these constraints already
fi
echo "ckpt: making the Python environment $venv ($mode versions; docs/dependencies.md)"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
if [ "$mode" = pinned ]; then
  "$venv/bin/python" -m pip install "${pip_quiet[@]}" -r "$requirements" -c "$constraints"
  # Exactly the pins, nothing unpinned let in, the servers beside the interpreter.
  "$venv/bin/python" tools/check-python-env.py "$constraints"
else
  "$venv/bin/python" -m pip install "${pip_quiet[@]}" --upgrade -r "$requirements"
  # The drift, pinned -> latest (exit 77: this environment differs on purpose).
  CKPT_DEPS=latest "$venv/bin/python" tools/check-python-env.py "$constraints" || [ $? -eq 77 ]
fi
"$venv/bin/python" -c "import safetensors, numpy, xxhash, nanobind, scikit_build_core, torch, ml_dtypes, pytest, matplotlib, gguf, moto.server, boto3, s3fs"
printf '%s\n' "$stamp_text" > "$venv/.ckpt-stamp"
