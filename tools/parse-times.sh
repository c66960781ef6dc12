#!/usr/bin/env bash
# Parse time of the public headers next to nlohmann/json.hpp alone, measured side by side in one run
# (issue 10 part 5; the layout decision and its numbers are in spec/LAYOUT.md).
#   tools/parse-times.sh [--check] [--all] [--against REV] [-n REPS] [HEADER...]
# Each header is compiled as a one-line translation unit `#include <HEADER>` with
#   $CXX -std=c++17 -fsyntax-only -Iinclude $CXXFLAGS
# (the library's language mode; -fsyntax-only parses and instantiates templates, generates no code),
# once header-only (rows HEADER) and once as a user of the compiled library ckpt::compiled parses it,
# with -DCKPT_SEPARATE_COMPILATION (rows compiled:HEADER, spec/LAYOUT.md 3.3).
# Rounds alternate over the headers (json, ckpt, store, json, ckpt, store, ...) so a change in machine
# load hits every header alike; the time is user+system CPU seconds of the compiler (steadier than wall
# time on a shared machine), and the median of REPS rounds (default 5) is reported with its ratio to
# nlohmann/json.hpp. --all adds every public header (include/ckpt/**/*.hpp outside impl/, no MPI/CUDA).
# --check exits 1 when a target of issue 10 is missed: compiled:ckpt/ckpt.hpp <= 1.5x and
# compiled:ckpt/store/store.hpp <= 1.0x json (the header-only rows are reported, not gated).
# --against REV also measures the same headers as the git revision REV has them (rows REV:HEADER, in
# the same alternating rounds), for a before/after table.
# Environment: CXX (default c++), CXXFLAGS (extra flags, e.g. -I for a non-system nlohmann).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
all=0
reps=5
against=
headers=()
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --all) all=1 ;;
    -n) reps="$2"; shift ;;
    --against) against="$2"; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) headers+=("$1") ;;
  esac
  shift
done
cxx=${CXX:-c++}
# shellcheck disable=SC2206  # CXXFLAGS is a list of flags
flags=(-std=c++17 -fsyntax-only -Iinclude ${CXXFLAGS:-})

baseline=nlohmann/json.hpp
[ ${#headers[@]} -gt 0 ] || headers=(ckpt/ckpt.hpp ckpt/store/store.hpp)
if [ "$all" = 1 ]; then
  while IFS= read -r h; do
    h=${h#include/}
    case " ${headers[*]} " in *" $h "*) continue ;; esac
    grep -qE '#include[[:space:]]*<(mpi|cuda_runtime|cuda)\.h>' "include/$h" && continue
    headers+=("$h")
  done < <(find include/ckpt -name '*.hpp' -not -path '*/impl/*' | sort)
fi
all_headers=("$baseline" "${headers[@]}")
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if [ -n "$against" ]; then
  mkdir -p "$scratch/rev"
  git archive "$against" include | tar -x -C "$scratch/rev"
  for h in "${headers[@]}"; do
    [ -f "$scratch/rev/include/$h" ] && all_headers+=("$against:$h")
  done
fi
for h in "${headers[@]}"; do all_headers+=("compiled:$h"); done

# One compile, printing user+sys CPU seconds; a header that does not compile stops the run.
# REV:HEADER compiles HEADER from the exported revision (its include/ searched first),
# compiled:HEADER with CKPT_SEPARATE_COMPILATION defined.
parse_seconds() {
  local out header=$1 extra=()
  case "$header" in
    compiled:*) extra=(-DCKPT_SEPARATE_COMPILATION); header=${header#*:} ;;
    *:*) extra=(-I "$scratch/rev/include"); header=${header#*:} ;;
  esac
  out=$( { TIMEFORMAT='%3U %3S'; time "$cxx" "${extra[@]}" "${flags[@]}" -x c++ - <<<"#include <$header>" 2>/dev/null; } 2>&1 ) || {
    echo "parse-times: $1 does not compile: $cxx ${extra[*]} ${flags[*]}" >&2
    "$cxx" "${extra[@]}" "${flags[@]}" -x c++ - <<<"#include <$header>" >&2 || true
    exit 2
  }
  awk '{ printf "%.3f\n", $(NF-1) + $NF }' <<<"$out"
}

declare -A samples
for ((r = 0; r < reps; ++r)); do
  for h in "${all_headers[@]}"; do
    samples[$h]+="$(parse_seconds "$h") "
  done
done

median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# $($cxx --version | head -1); ${flags[*]}; median of $reps alternating rounds, CPU seconds"
base=$(median "${samples[$baseline]}")
status=0
printf '%-34s %8s %8s %8s  %s\n' header seconds ratio target samples
for h in "${all_headers[@]}"; do
  m=$(median "${samples[$h]}")
  ratio=$(awk -v a="$m" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
  target=-
  case "$h" in
    compiled:ckpt/ckpt.hpp) target=1.5 ;;
    compiled:ckpt/store/store.hpp) target=1.0 ;;
  esac
  verdict=
  if [ "$target" != - ]; then
    if awk -v r="$ratio" -v t="$target" 'BEGIN { exit !(r <= t) }'; then verdict=ok; else verdict=MISSED; status=1; fi
  fi
  printf '%-34s %8.2f %8s %8s  %s%s\n' "$h" "$m" "${ratio}x" "$target" "${samples[$h]}" "${verdict:+ $verdict}"
done
if [ "$check" = 1 ]; then exit "$status"; fi
exit 0
