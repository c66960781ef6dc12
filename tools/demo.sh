#!/usr/bin/env bash
# The main-job demo: installs what it needs, builds the tools, then makes real checkpoint files,
# inspects and verifies them, damages a copy and shows the verifier pinpointing the damage.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/venv.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCKPT_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
BIN=$PWD/build
WORK=${CKPT_DEMO_DIR:-$(mktemp -d /tmp/ckpt-demo-XXXXXX)}
mkdir -p "$WORK"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

say "1. A model saved by the Python safetensors package (the format most weights ship in)"
python3 - "$WORK/model.safetensors" <<'PY'
import sys, numpy as np
from safetensors.numpy import save_file
rng = np.random.default_rng(0)
tensors = {f"layers.{i}.attn.weight": rng.standard_normal((512, 512), dtype=np.float32) for i in range(8)}
tensors["embed.weight"] = rng.standard_normal((4096, 256)).astype(np.float16)
tensors["step"] = np.array(1000, dtype=np.int64)
save_file(tensors, sys.argv[1], metadata={"framework": "demo", "note": "made by tools/demo.sh"})
PY
ls -l "$WORK/model.safetensors"

say "2. Convert it to a checksummed .ckpt (streamed, hashed while written, fsynced, renamed atomically)"
run "$BIN/ckpt-convert" "$WORK/model.safetensors" "$WORK/model.ckpt"

say "3. Inspect it"
run "$BIN/ckpt-inspect" "$WORK/model.ckpt"

say "4. Verify every byte of it"
run "$BIN/ckpt-verify" "$WORK/model.ckpt"
echo "exit status: $?"

say "5. Damage a copy: flip one byte in the middle of the data, as bit rot would"
cp "$WORK/model.ckpt" "$WORK/damaged.ckpt"
size=$(stat -c %s "$WORK/damaged.ckpt")
printf '\xff' | dd of="$WORK/damaged.ckpt" bs=1 seek=$((size / 2)) conv=notrunc status=none
echo "flipped the byte at offset $((size / 2))"
set +e
run "$BIN/ckpt-verify" "$WORK/damaged.ckpt"
echo "exit status: $? (1 = integrity problem found)"

say "6. Truncate another copy, as an interrupted copy would"
head -c $((size - 1000)) "$WORK/model.ckpt" > "$WORK/truncated.ckpt"
run "$BIN/ckpt-verify" "$WORK/truncated.ckpt"
echo "exit status: $?"
set -e

say "7. Convert back and compare with the original in the Python safetensors package"
run "$BIN/ckpt-convert" "$WORK/model.ckpt" "$WORK/roundtrip.safetensors"
python3 - "$WORK/model.safetensors" "$WORK/roundtrip.safetensors" <<'PY'
import sys, numpy as np
from safetensors import safe_open
a, b = (safe_open(p, "np") for p in sys.argv[1:3])
assert sorted(a.keys()) == sorted(b.keys()) and a.metadata() == b.metadata()
for k in a.keys():
    x, y = a.get_tensor(k), b.get_tensor(k)
    assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), k
print(f"round trip exact: {len(a.keys())} tensors, metadata {a.metadata()}")
PY
if [ -x "$BIN/ckpt-demo-train" ]; then
  bash tools/demo-store.sh "$BIN" "$WORK"
fi
bash tools/demo-tiers.sh "$BIN" "$WORK"
say "Done. Files are in $WORK"
