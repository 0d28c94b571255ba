#!/usr/bin/env bash
# The README's first command: sets up, builds, and runs the main job on the
# CPU: export a LeNet-style CNN from PyTorch, compile it into a training
# plan, train it for one epoch on Fashion-MNIST and report test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
BUILD_DIR=${CDP_BUILD_DIR:-build}
BIN="$BUILD_DIR/bin"
OUT=${CDP_DEMO_DIR:-$BUILD_DIR/demo}
mkdir -p "$OUT"

echo "== export: a LeNet-style CNN from PyTorch (batch 8, opset 14, training mode)"
/usr/bin/python3 test/e2e/export_torch_models.py "$OUT" lenet 2>/dev/null

echo "== compile: $BIN/cdp-compile $OUT/lenet.onnx -o $OUT/lenet.cdp --optimizer momentum --lr 0.01"
"$BIN/cdp-compile" "$OUT/lenet.onnx" -o "$OUT/lenet.cdp" --optimizer momentum --lr 0.01

echo "== train: $BIN/cdp-run $OUT/lenet.cdp --data fashion-mnist --epochs 1 --eval"
"$BIN/cdp-run" "$OUT/lenet.cdp" --data fashion-mnist --epochs 1 --eval \
  --metrics "$OUT/metrics.jsonl" --save-onnx "$OUT/lenet-trained.onnx"

echo "== outputs: $OUT/metrics.jsonl (one line per step), $OUT/lenet-trained.onnx"
