#!/usr/bin/env bash
# The store demo (called at the end of tools/demo.sh): a training run checkpoints into a store, is
# killed with SIGKILL in the middle of a save, ckpt-repair explains and fixes what the crash left,
# ckpt-verify checks the store, and the resumed run ends with exactly the weights of a run that was
# never interrupted.   Usage: tools/demo-store.sh BIN_DIR WORK_DIR
set -uo pipefail
BIN=${1:?usage: demo-store.sh BIN_DIR WORK_DIR}
WORK=${2:?usage: demo-store.sh BIN_DIR WORK_DIR}
mkdir -p "$WORK"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
# 200 steps of a small MLP, a checkpoint every 20 steps, each with 32 MiB of extra optimizer state.
TRAIN=(--steps 200 --save-every 20 --seed 42 --extra-mib 32 --keep 3)
STORE=$WORK/store
REFERENCE=$WORK/store-uninterrupted
rm -rf "$STORE" "$REFERENCE"

say "8. A training run that checkpoints into a store, killed with SIGKILL in the middle of a save"
printf '$ %s --store %s %s &   (then kill -9 while it saves step 120)\n' "$BIN/ckpt-demo-train" "$STORE" "${TRAIN[*]}"
"$BIN/ckpt-demo-train" --store "$STORE" "${TRAIN[@]}" > "$WORK/train.log" 2>&1 &
pid=$!
# Kill once step 120's shard file is being written (a few MiB of its 32 are on disk).
for _ in $(seq 1 6000); do
  [ -n "$(find "$STORE" -path '*/step-120-*' -name 'shard-*' -size +4M 2>/dev/null)" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.005
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
echo "exit status: $? (137 = killed by SIGKILL)"
tail -n 4 "$WORK/train.log" | sed 's/^/  | /'
echo "what the crash left:"
ls -l "$STORE" | sed 's/^/  /'
for d in "$STORE"/step-*; do
  printf '  %s/\n' "$(basename "$d")"
  ls -l "$d" | tail -n +2 | sed 's/^/    /'
done

say "9. ckpt-repair explains what it found and what it does, then does it"
run "$BIN/ckpt-repair" "$STORE"
echo "exit status: $? (0 = the store is consistent)"

say "10. ckpt-verify checks every committed step of the store, chunk by chunk"
run "$BIN/ckpt-verify" "$STORE"
echo "exit status: $?"

say "11. Resume the killed run from its latest committed step, and run the same job uninterrupted"
printf '$ %s --store %s %s\n' "$BIN/ckpt-demo-train" "$STORE" "${TRAIN[*]}"
out=$("$BIN/ckpt-demo-train" --store "$STORE" "${TRAIN[@]}")
printf '%s\n' "$out" | head -n 2
echo "..."
printf '%s\n' "$out" | tail -n 2
resumed=$(printf '%s\n' "$out" | tail -n 1)
printf '$ %s --store %s %s -q\n' "$BIN/ckpt-demo-train" "$REFERENCE" "${TRAIN[*]}"
uninterrupted=$("$BIN/ckpt-demo-train" --store "$REFERENCE" "${TRAIN[@]}" -q | tail -n 1)
echo "killed, repaired and resumed: $resumed"
echo "never interrupted:            $uninterrupted"
if [ "$resumed" = "$uninterrupted" ] && [ -n "$resumed" ]; then
  echo "identical: the resumed run is bit-exact"
else
  echo "MISMATCH"
  exit 1
fi

say "12. The same run with async saves, stopped by SIGTERM with a 2-second flush deadline"
ASYNC_STORE=$WORK/store-async
rm -rf "$ASYNC_STORE"
printf '$ %s --store %s %s --async --flush-deadline 2 &   (then kill -TERM)\n' "$BIN/ckpt-demo-train" "$ASYNC_STORE" "${TRAIN[*]}"
"$BIN/ckpt-demo-train" --store "$ASYNC_STORE" "${TRAIN[@]}" --async --flush-deadline 2 > "$WORK/train-async.log" 2>&1 &
pid=$!
for _ in $(seq 1 6000); do
  grep -q "step 100 staged" "$WORK/train-async.log" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.005
done
kill -TERM "$pid" 2>/dev/null
wait "$pid"
echo "exit status: $? (0 = stopped cleanly within the deadline)"
tail -n 2 "$WORK/train-async.log" | sed 's/^/  | /'
run "$BIN/ckpt-verify" "$ASYNC_STORE"
out=$("$BIN/ckpt-demo-train" --store "$ASYNC_STORE" "${TRAIN[@]}" --async -q | tail -n 1)
echo "stopped by SIGTERM and resumed: $out"
if [ "$out" = "$uninterrupted" ]; then echo "identical: bit-exact again"; else echo "MISMATCH"; exit 1; fi

say "13. ckpt-plan: how often to checkpoint, from the saves this store recorded"
run "$BIN/ckpt-plan" --store "$ASYNC_STORE" --preset llama3-405b --restart-seconds 600
