#!/usr/bin/env bash
# The tiers demo (called at the end of tools/demo.sh; spec/TIERS.md): 4 MPI ranks, each a simulated
# node with its own memory root, keep their latest steps in memory with one replica on the next node
# and every 4th step in a persistent store. A rank is SIGKILLed, its whole node's memory is deleted,
# and the restarted job agrees on the newest step every shard of which still verifies somewhere,
# fetches the lost shard from its replica, and ends bit-identical to an uninterrupted run.
#   Usage: tools/demo-tiers.sh BIN_DIR WORK_DIR   (BIN_DIR: the tools; tier_train is built here)
set -uo pipefail
BIN=${1:?usage: demo-tiers.sh BIN_DIR WORK_DIR}
WORK=${2:?usage: demo-tiers.sh BIN_DIR WORK_DIR}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
command -v mpirun >/dev/null || { echo "demo-tiers: no mpirun, skipped"; exit 0; }
# The trainer is the MPI failure table's (tests/mpi/tier_train.cpp): built alone, beside the tools.
cmake -S . -B build-demo-tiers -DCMAKE_BUILD_TYPE=Release -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_TOOLS=OFF >/dev/null
cmake --build build-demo-tiers --target tier_train -j"$(nproc)" >/dev/null || { echo "demo-tiers: build failed"; exit 1; }
TRAIN=$PWD/build-demo-tiers/tier_train
ROOT=$WORK/tiers
rm -rf "$ROOT" && mkdir -p "$ROOT"
# mpirun as root in a container, shared memory without the single-copy mechanism (cmake/tests-mpi.cmake).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
MPI=(mpirun -np 4 --oversubscribe "$TRAIN" --root "$ROOT" --nodes n0,n1,n2,n3 --steps 10)

say "14. Recovery in seconds: 4 ranks on 4 simulated nodes, memory every 2 steps, a replica on the next node, persistent every 4"
echo "\$ ${MPI[*]} --kill train:7:2     (rank 2 SIGKILLs itself at step 7; mpirun tears the job down)"
"${MPI[@]}" --kill train:7:2 >"$WORK/tiers-killed.log" 2>&1
echo "exit status: $? (the job died)"
run "$BIN/ckpt-inspect" "$ROOT/node-n3"

say "15. Node n2 is lost: its memory root is gone with it"
run rm -rf "$ROOT/node-n2"

say "16. The job restarts: every rank reports what it reaches, all agree on one step by content, rank 2's shard comes from its replica on n3"
printf '$ %s\n' "${MPI[*]}"
start=$(date +%s.%N)
"${MPI[@]}" 2>"$WORK/tiers-resumed.log" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
print("resumed step %s (a step of %s ranks); trained on to step 10" % (r["resumed"], r["world_of_step"]))
for rank, s in enumerate(r["sources"]):
    print("  rank %d: %s" % (rank, s))
print("final state bit-identical to an uninterrupted run:", r["identical"])
sys.exit(0 if r["identical"] else 1)'
status=$?
echo "exit status: $status; the whole restart, resume and 4 more steps took $(python3 -c "import time; print(round(time.time() - $start, 1))") s"

say "17. Every copy the restarted node n2 now holds, verified"
run "$BIN/ckpt-verify" "$ROOT/node-n2"
exit $status
