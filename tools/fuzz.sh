#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz in build-fuzz and runs each one (issue 9; the foreign
# decoders pickle, gguf, sidecar, hf_index: issue 22 part 6).
#   tools/fuzz.sh [SECONDS | -runs=N] [TARGET...]   default: 60 seconds each, all eight targets
#   tools/fuzz.sh --make-seeds                       rewrites tests/fuzz/seeds/: the library's encoders, and
#                                                    tests/fuzz/make_foreign_seeds.py (torch, gguf, safetensors)
# Environment: CKPT_FUZZ_SEED (libFuzzer -seed), CKPT_FUZZ_JOBS (build parallelism), CKPT_FUZZ_BUILD (folder).
# Corpora live in build-fuzz/corpus/<target>/, seeded from tests/fuzz/seeds/<target>/, spec/golden/*.ckpt
# (index), tests/data/dcp/*.metadata (pickle) and tests/regress/<target>-*. Every crasher is copied to tests/regress/<target>-crash-<sha1>.bin,
# where tests/test_regress.cpp replays it in the normal suite; the script then exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  bash tools/install-deps.sh
fi
build=${CKPT_FUZZ_BUILD:-build-fuzz}
if [ "${1:-}" = "--make-seeds" ]; then
  c++ -std=c++17 -O1 -Iinclude tests/fuzz/make_seeds.cpp -o "$build-make-seeds" -lpthread
  mkdir -p tests/fuzz/seeds/{index,manifest,journal,safetensors}
  "./$build-make-seeds" tests/fuzz/seeds
  # Foreign formats from their real writers; sidecars through make_seeds --write-sidecar (build_sidecar).
  python3 tests/fuzz/make_foreign_seeds.py tests/fuzz/seeds "./$build-make-seeds" --write-sidecar
  rm -f "$build-make-seeds"
  exit 0
fi
limit="-max_total_time=60"
case "${1:-}" in
  -runs=*) limit="$1"; shift ;;
  ''|*[!0-9]*) ;;
  *) limit="-max_total_time=$1"; shift ;;
esac
targets=("$@")
all_targets=(index manifest journal safetensors pickle gguf sidecar hf_index)
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
jobs=${CKPT_FUZZ_JOBS:-$(nproc)}
# CKPT_FUZZ_SEED fixes libFuzzer's random seed, so a fixed -runs=N is the same run every time (CI).
seed=()
[ -z "${CKPT_FUZZ_SEED:-}" ] || seed=("-seed=$CKPT_FUZZ_SEED")

# The fuzz targets include the headers themselves: no compiled library, S3 client or gloo to build.
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_FUZZ=ON \
  -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_TOOLS=OFF -DCKPT_CUDA=OFF -DCKPT_MPI=OFF \
  -DCKPT_COMPILED=OFF -DCKPT_S3=OFF -DCKPT_GLOO=OFF >/dev/null
# Named targets build one after another (the generated Makefile is .NOTPARALLEL); all of them, in parallel.
if [ "${targets[*]}" = "${all_targets[*]}" ]; then
  cmake --build "$build" -j"$jobs"
else
  cmake --build "$build" -j"$jobs" --target $(printf 'fuzz_%s ' "${targets[@]}")
fi

status=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  crashes="$build/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  cp -n tests/fuzz/seeds/"$t"/* "$corpus"/ 2>/dev/null || true
  [ "$t" = index ] && cp -n spec/golden/*.ckpt tests/regress/*.ckpt "$corpus"/ 2>/dev/null || true
  [ "$t" = pickle ] && cp -n tests/data/dcp/*.metadata "$corpus"/ 2>/dev/null || true
  cp -n tests/regress/"$t"-* "$corpus"/ 2>/dev/null || true
  echo "== fuzz_$t ($limit) =="
  # malloc_limit_mb: the decoders must stay within a small multiple of their input (issue 9).
  rc=0
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/fuzz_$t" "$corpus" "$limit" "${seed[@]}" -max_len=65536 -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -print_final_stats=1 -artifact_prefix="$crashes/" 2>"$build/fuzz_$t.log" || rc=$?
  grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)|^#[0-9]+.*DONE" "$build/fuzz_$t.log" || true
  for f in "$crashes"/*; do
    [ -e "$f" ] || continue
    dest="tests/regress/$t-$(basename "$f" | cut -d- -f1)-$(sha1sum "$f" | cut -c1-12).bin"
    cp "$f" "$dest"
    rm -f "$f"
    echo "fuzz_$t: finding saved as $dest"
    status=1
  done
  if [ "$rc" -ne 0 ]; then
    echo "fuzz_$t exited $rc; the end of $build/fuzz_$t.log:"
    tail -40 "$build/fuzz_$t.log"
    status=1
  fi
done
exit $status
