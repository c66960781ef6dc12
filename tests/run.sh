#!/usr/bin/env bash
# The test command: installs what it needs, builds, runs the suite, then runs it again under ASan+UBSan.
#   tests/run.sh            with the Python packages of tools/constraints.txt, in build/venv
#   tests/run.sh --latest   with the newest of each instead, in build/venv-latest (docs/dependencies.md)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  ""|--latest) . tools/venv.sh "${1:-}" ;;
  *) echo "tests/run.sh: unknown option '$1' (tests/run.sh [--latest])" >&2; exit 2 ;;
esac
python=$CKPT_VENV/bin/python
# Each phase's header says when it began, so a slow run shows where its time went.
phase() { echo "== $* [$((SECONDS / 60))m$((SECONDS % 60))s] =="; }
echo "== Python environment: $CKPT_VENV ($("$python" -m pip freeze | grep -c ==) packages; moto $("$python" -c 'import moto; print(moto.__version__)'), torch $("$python" -c 'import torch; print(torch.__version__)')) =="
jobs=$(nproc)
phase "build (Release)"
# Tests on explicitly: the demo configures build/ without them and the cache would keep that.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_TOOLS=ON -DPython3_EXECUTABLE="$python" >/dev/null
cmake --build build -j"$jobs"
phase "tests (Release)"
(cd build && ctest --output-on-failure --no-tests=error -j"$jobs")
phase "Python package (pip install ./python) and its tests"
# The package builds its own copy of the library (ckpt::compiled) against these headers, with the
# environment's nanobind and scikit-build-core; its tests use the tools just built (CKPT_BIN) and
# torch.distributed with gloo on several processes.
pip_log=$(mktemp)
"$python" -m pip install --disable-pip-version-check --no-build-isolation --no-deps ./python >"$pip_log" 2>&1 || { cat "$pip_log"; exit 1; }
rm -f "$pip_log"
"$python" -c "import ckpt, ckpt.torch.dcp"
(cd python/tests && CKPT_BIN="$PWD/../../build" "$python" -m pytest -q -p no:cacheprovider --durations=12 .)
phase "build (ASan+UBSan)"
# -g1: line tables for the sanitizers' stack traces, without full debug info (less to compile and to link).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCKPT_SANITIZE=ON -DCKPT_CUDA=OFF -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_TOOLS=ON -DPython3_EXECUTABLE="$python" >/dev/null
cmake --build build-asan -j"$jobs"
phase "tests (ASan+UBSan)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure --no-tests=error -j"$jobs" -LE no_sanitize)
phase "fuzz (libFuzzer + ASan + UBSan, fixed runs)"
# Each decoder's target for a fixed number of executions with a fixed seed: a finding is saved under
# tests/regress/ and fails the run (tools/fuzz.sh; long soaks: tools/fuzz.sh SECONDS).
CKPT_FUZZ_SEED=1 CKPT_FUZZ_JOBS="$jobs" bash tools/fuzz.sh -runs=20000
phase "passed"
