#!/usr/bin/env bash
# A model at real size through the plan: a ReLU MLP of 4096-wide layers
# exported by torch 1.13 (8 layers: 134M parameters, 537 MB of ONNX; pass
# LAYERS=18 for 302M, 1.2 GB), compiled for cdp on 4 devices and for 1f1b
# on 4 stages; prints the compile's time and peak memory, the plan's and
# its weights file's sizes; then trains 2 steps of the 1f1b plan under
# `mpirun -np 4` (a stage per process) and prints each rank's peak
# resident memory and the bytes it read of the weights file (its preads
# of that file, traced with strace) against the file's size.
# Usage: bench/large-model.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build}/bin")
LAYERS=${LAYERS:-8}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
/usr/bin/python3 - "$WORK" "$LAYERS" <<'PY'
import sys, torch
import numpy as np
work, layers = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
modules = []
for _ in range(layers):
    modules += [torch.nn.Linear(4096, 4096), torch.nn.ReLU()]
modules.append(torch.nn.Linear(4096, 10))
model = torch.nn.Sequential(*modules)
torch.onnx.export(model, torch.randn(4, 4096), work + "/mlp.onnx", input_names=["input"],
                  output_names=["logits"], opset_version=14,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
rng = np.random.default_rng(0)
np.save(work + "/x.npy", rng.standard_normal((16, 4096)).astype(np.float32))
np.save(work + "/y.npy", rng.integers(0, 10, 16))
print("model: %d layers of 4096, %.0fM parameters" % (
    layers + 1, sum(p.numel() for p in model.parameters()) / 1e6))
PY
echo "ONNX: $(stat -c %s "$WORK/mlp.onnx") bytes"
compile() { # name, flags...
  local name=$1
  shift
  /usr/bin/time -f "cdp-compile $*: %e s, peak resident %M KiB" \
    "$BIN/cdp-compile" "$WORK/mlp.onnx" -o "$WORK/$name.cdp" "$@" > /dev/null
  echo "  plan $(stat -c %s "$WORK/$name.cdp") bytes, weights file $(stat -c %s "$WORK/$name.cdp.weights") bytes"
}
compile cdp --strategy cdp --devices 4 --stages 4
compile 1f1b --strategy 1f1b --stages 4 --micro-batches 4 --report "$WORK/1f1b.json"
/usr/bin/python3 -c "import json, sys; print('  the report predicts per device (bytes):', json.load(open(sys.argv[1]))['peak']['device_bytes'])" "$WORK/1f1b.json"
cd "$WORK"
ROOT=()
[ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root) # a container's root
mpirun "${ROOT[@]}" --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo -np 4 \
  sh -c 'exec /usr/bin/time -o time.$OMPI_COMM_WORLD_RANK -f "rank $OMPI_COMM_WORLD_RANK: peak resident %M KiB" strace -f -qq -e trace=openat,pread64 -e signal=none -o trace.$OMPI_COMM_WORLD_RANK '"$BIN"'/cdp-run 1f1b.cdp --feed input=x.npy --feed labels=y.npy --steps 2' > /dev/null
cat time.*
# The constant: a rank's peak on a model of a few hundred parameters.
/usr/bin/python3 "$OLDPWD/test/Import/make_models.py" mlp4eq tiny.onnx
"$BIN/cdp-compile" tiny.onnx -o tiny.cdp --strategy 1f1b --stages 4 --micro-batches 4 \
  --stage-boundaries tanh0,tanh1,tanh2 > /dev/null
/usr/bin/python3 -c "import numpy as np; np.save('tx.npy', np.zeros((8, 16), np.float32)); np.save('ty.npy', np.zeros(8, np.int64))"
mpirun "${ROOT[@]}" --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo -np 4 \
  sh -c 'exec /usr/bin/time -o tiny.$OMPI_COMM_WORLD_RANK -f "%M" '"$BIN"'/cdp-run tiny.cdp --feed x=tx.npy --feed labels=ty.npy --steps 2' > /dev/null
echo "a rank's constant (the same under mpirun on a 4-layer MLP of width 16): $(sort -n tiny.* | tail -1) KiB"
# The bytes each rank read of the weights file: its preads on that file.
/usr/bin/python3 - 1f1b.cdp.weights <<'PY'
import glob, re, sys
total = 0
for path in sorted(glob.glob("trace.*")):
    fds, read = set(), 0
    for line in open(path):
        opened = re.search(r'openat\(.*"[^"]*' + re.escape(sys.argv[1]) + r'".*= (\d+)$', line)
        if opened:
            fds.add(opened.group(1))
        pread = re.search(r'pread64\((\d+),.*= (\d+)$', line)
        if pread and pread.group(1) in fds:
            read += int(pread.group(2))
    total += read
    print("rank %s: read %d bytes of the weights file" % (path.split(".")[-1], read))
print("all ranks: %d bytes; the file: %d" % (total, __import__("os").path.getsize(sys.argv[1])))
PY
