#!/usr/bin/env bash
# The test command: installs what it needs, builds, runs the suite, then runs it again under ASan+UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
jobs=$(nproc)
echo "== build (Release) =="
# Tests on explicitly: the demo configures build/ without them and the cache would keep that.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_TOOLS=ON >/dev/null
cmake --build build -j"$jobs"
echo "== tests (Release) =="
(cd build && ctest --output-on-failure --no-tests=error -j"$jobs")
echo "== Python package (pip install ./python) and its tests =="
# The package builds its own copy of the library (ckpt::compiled) against these headers; its tests use
# the tools just built (CKPT_BIN) and torch.distributed with gloo on several processes.
pip_log=$(mktemp)
python3 -m pip install --disable-pip-version-check --no-build-isolation ./python >"$pip_log" 2>&1 || { cat "$pip_log"; exit 1; }
rm -f "$pip_log"
python3 -c "import ckpt, ckpt.torch.dcp"
(cd python/tests && CKPT_BIN="$PWD/../../build" python3 -m pytest -q -p no:cacheprovider .)
echo "== build (ASan+UBSan) =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCKPT_SANITIZE=ON -DCKPT_CUDA=OFF -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_TOOLS=ON >/dev/null
cmake --build build-asan -j"$jobs"
echo "== tests (ASan+UBSan) =="
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure --no-tests=error -j"$jobs" -LE no_sanitize)
echo "== fuzz (libFuzzer + ASan + UBSan, fixed runs) =="
# Each decoder's target for a fixed number of executions with a fixed seed: a finding is saved under
# tests/regress/ and fails the run (tools/fuzz.sh; long soaks: tools/fuzz.sh SECONDS).
CKPT_FUZZ_SEED=1 CKPT_FUZZ_JOBS="$jobs" bash tools/fuzz.sh -runs=20000
