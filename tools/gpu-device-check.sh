#!/usr/bin/env bash
# The GPU device check (spec/GPU.md 10): one short run on a CUDA machine (an H200 session) that
#   1. builds the CUDA tests, the benchmark and ckpt-verify with nvcc for sm_90,
#   2. runs the GPU tests: device digests against the CPU on fresh random data, every grid shape,
#      hashed saves, verified loads, GPU verify against CPU verify on damaged files,
#   3. times the device copy (bytes read + written), the hash kernel on 4 GiB (1 MiB chunks, mixed
#      sizes), save/load through pinned staging, and ckpt-verify --gpu against the CPU path on a file
#      in page cache, and prints one table. Target: hashing >= 0.7x the copy bandwidth.
# About 3-5 minutes including the build; every step has its own time limit.
#
#   bash tools/gpu-device-check.sh --prepare    here, once: copy the header-only dependencies the device
#                                               image lacks (CLI11, nlohmann-json, xxhash.h) into
#                                               build-gpu-deps/ (ignored by git), then check as --host-only
#   run(command="bash tools/gpu-device-check.sh", carry=["build-gpu-deps"], timeout_s=540)
#   bash tools/gpu-device-check.sh --host-only  build everything and run what needs no GPU (no timings)
#
# Environment: GIB (default 4), REPS (default 5), ARCH (default sm_90), CKPT_GPU_SEED (repeat a run),
# PREBUILT=1 (use the binaries already in build-gpu-check/, e.g. built here and carried, when a build
# on the device is not possible).
# Five files (build.log, test_gpu.log, bench.log, verify.log, results.md) land in $OUT when it is set
# (the device tool returns at most 8), else in build-gpu-check/.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

mode=device
case "${1:-}" in
  --prepare) mode=prepare ;;
  --host-only) mode=host ;;
  "") ;;
  *) echo "usage: $0 [--prepare | --host-only]" >&2; exit 2 ;;
esac

deps="build-gpu-deps/include"
if [ "$mode" = prepare ]; then
  mkdir -p "$deps"
  for h in xxhash.h CLI nlohmann; do
    if [ ! -e "/usr/include/$h" ]; then echo "prepare: /usr/include/$h is missing here (run tools/install-deps.sh)" >&2; exit 2; fi
    rm -rf "${deps:?}/$h"
    cp -r "/usr/include/$h" "$deps/"
  done
  echo "prepare: $(du -sh build-gpu-deps | cut -f1) of headers in build-gpu-deps/; now checking the build here"
  mode=host
fi

nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
arch=${ARCH:-sm_90}
gib=${GIB:-4}
reps=${REPS:-5}
build="build-gpu-check"
logs=${OUT:-$build}
mkdir -p "$build" "$logs"
failed=0
note() { echo "== $*"; }
fail() { echo "!! $*"; failed=1; }

note "environment"
(command -v nvidia-smi >/dev/null && nvidia-smi -L) || echo "nvidia-smi: not available"
"$nvcc" --version | tail -2
echo "cpus: $(nproc); arch: $arch; mode: $mode"

# Headers: the system's first, the carried copies where the system lacks them.
flags=(-std=c++17 -O3 "-arch=$arch" --diag-suppress=2810 -Iinclude -Itools -Itests -Xcompiler=-pthread -lpthread)
[ -d "$deps" ] && flags+=("-I$deps")

note "build (nvcc $arch, in parallel)"
start=$(date +%s)
have_verify=1
if [ "${PREBUILT:-0}" = 1 ] && [ -x "$build/test_gpu" ] && [ -x "$build/gpu_bench" ] && [ -x "$build/ckpt-verify" ]; then
  echo "build: skipped, PREBUILT=1 uses the binaries in $build/"
else
  build_one() {  # name, sources...
    local name=$1
    shift
    timeout 420 "$nvcc" "${flags[@]}" "$@" -o "$build/$name" >"$build/build-$name.log" 2>&1
  }
  build_one test_gpu tests/cuda/test_gpu.cu & p1=$!
  build_one gpu_bench tests/cuda/gpu_bench.cu & p2=$!
  build_one ckpt-verify -DCKPT_GPU_TOOLS tools/ckpt-verify.cpp tools/gpu_verify_cuda.cu & p3=$!
  wait $p1 || fail "build of test_gpu failed: $(tail -5 "$build/build-test_gpu.log")"
  wait $p2 || fail "build of gpu_bench failed: $(tail -5 "$build/build-gpu_bench.log")"
  wait $p3 || { fail "build of ckpt-verify failed: $(tail -5 "$build/build-ckpt-verify.log")"; have_verify=0; }
  echo "build: $(($(date +%s) - start)) s"
  for name in test_gpu gpu_bench ckpt-verify; do echo "--- $name"; cat "$build/build-$name.log"; done >"$logs/build.log"
fi

note "GPU tests"
if [ -x "$build/test_gpu" ]; then
  timeout 240 "$build/test_gpu" 2>&1 | tee "$logs/test_gpu.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" = 77 ] && [ "$mode" = host ]; then echo "test_gpu: skipped (no device), as expected here"
  elif [ "$rc" != 0 ]; then fail "test_gpu exited $rc"; fi
fi

note "benchmark ($gib GiB, $reps timed runs each)"
file=""
if [ -x "$build/gpu_bench" ]; then
  seed_args=()
  [ -n "${CKPT_GPU_SEED:-}" ] && seed_args=(--seed "$CKPT_GPU_SEED")
  timeout 300 "$build/gpu_bench" --gib "$gib" --reps "$reps" --dir "${TMPDIR:-/tmp}" --keep "${seed_args[@]}" 2>&1 | tee "$logs/bench.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" = 77 ] && [ "$mode" = host ]; then echo "gpu_bench: skipped (no device), as expected here"
  elif [ "$rc" != 0 ]; then fail "gpu_bench exited $rc"; fi
  file=$(sed -n 's/^file: //p' "$logs/bench.log" | tail -1)
fi

note "ckpt-verify --gpu against the CPU path"
tool_rows=""
if [ "$have_verify" = 1 ]; then
  if [ -z "$file" ]; then
    # No benchmark file (no device): a small file through the CPU path still proves the tool runs.
    file=$(find spec/golden -name '*.ckpt' 2>/dev/null | sort | head -1)
  fi
  if [ -n "$file" ] && [ -f "$file" ]; then
    bytes=$(stat -c %s "$file")
    cat "$file" >/dev/null  # in page cache
    time_tool() {  # label, args...: second of two runs
      local label=$1 t0 t1 rc
      shift
      timeout 120 "$build/ckpt-verify" "$@" "$file" >/dev/null 2>"$build/verify-$label.err"
      t0=$(date +%s.%N)
      timeout 120 "$build/ckpt-verify" "$@" "$file" >"$build/verify-$label.out" 2>>"$build/verify-$label.err"
      rc=$?
      t1=$(date +%s.%N)
      echo "ckpt-verify $label: exit $rc, $(awk -v a="$t0" -v b="$t1" -v n="$bytes" 'BEGIN { printf "%.2f s, %.1f GB/s", b - a, n / (b - a) / 1e9 }')"
      tool_rows+="| ckpt-verify $label (end to end, $(awk -v n="$bytes" 'BEGIN { printf "%.1f GiB", n / 2^30 }')) | $(awk -v a="$t0" -v b="$t1" -v n="$bytes" 'BEGIN { printf "%.1f", n / (b - a) / 1e9 }') | exit $rc |"$'\n'
      return $rc
    }
    time_tool cpu || fail "ckpt-verify on the CPU exited $? on an intact file"
    time_tool gpu --gpu
    rc=$?
    if [ "$mode" = host ]; then
      if [ "$rc" = 2 ] && grep -q "no usable GPU" "$build/verify-gpu.err"; then echo "ckpt-verify --gpu: exit 2 without a device, as expected here"
      else fail "ckpt-verify --gpu without a device: exit $rc, $(cat "$build/verify-gpu.err")"; fi
    elif [ "$rc" != 0 ]; then fail "ckpt-verify --gpu exited $rc: $(cat "$build/verify-gpu.err")"; fi
  else
    fail "no file to verify"
  fi
  case "$file" in "${TMPDIR:-/tmp}"/ckpt-gpu-bench-*) rm -f "$file" ;; esac
  for f in "$build"/verify-*; do echo "--- $f"; cat "$f"; done >"$logs/verify.log" 2>/dev/null
fi

note "results"
{
  sed -n '/^| measurement/,/^$/p' "$logs/bench.log" 2>/dev/null | sed '/^$/d'
  printf "%s" "$tool_rows"
  grep -E "^hash of 1 MiB chunks|^correctness" "$logs/bench.log" 2>/dev/null
  grep -E "^(PASSED|FAILED|SKIPPED)" "$logs/test_gpu.log" 2>/dev/null | sed 's/^/GPU tests: /'
} | tee "$logs/results.md"
if [ "$failed" = 0 ]; then echo "gpu-device-check: ok ($mode)"; else echo "gpu-device-check: FAILED ($mode)"; fi
exit "$failed"
