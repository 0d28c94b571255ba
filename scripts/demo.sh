#!/usr/bin/env bash
# The README's first command: sets up, builds, and runs the main job on the
# CPU: export a LeNet-style CNN from PyTorch and compile it with cdp. (Training
# it arrives with the next milestone; for now the job prints the imported IR
# summary.)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
BUILD_DIR=${CDP_BUILD_DIR:-build}
OUT=${CDP_DEMO_DIR:-$BUILD_DIR/demo}
mkdir -p "$OUT"

echo "== exporting a LeNet-style CNN from PyTorch (opset 14, training mode)"
/usr/bin/python3 test/e2e/export_torch_models.py "$OUT" lenet 2>/dev/null

echo "== cdp-compile $OUT/lenet.onnx --emit=mlir"
"$BUILD_DIR/bin/cdp-compile" "$OUT/lenet.onnx" --emit=mlir -o "$OUT/lenet.mlir"

echo "== imported IR summary"
/usr/bin/python3 - "$OUT/lenet.mlir" <<'PY'
import collections, re, sys
text = open(sys.argv[1]).read()
signature = re.search(r"func\.func @main\((.*)\) -> \((.*)\) \{", text)
ops = collections.Counter(re.findall(r"= (cdp\.\w+)", text))
params = re.findall(r'cdp\.param "([^"]+)"( buffer)? .*: tensor<([^>]+)>', text)
def count(shape):
    n = 1
    for d in shape.split("x")[:-1]:
        n *= int(d)
    return n
print("inputs:  ", signature.group(1))
print("outputs: ", signature.group(2))
print("ops:      %d  (%s)" % (sum(ops.values()) - ops["cdp.param"],
      ", ".join("%s %d" % (k[4:], v) for k, v in sorted(ops.items()) if k != "cdp.param")))
print("params:   %d tensors, %d values" % (len(params), sum(count(p[2]) for p in params)))
for name, buffer, shape in params:
    print("  %-14s %s%s" % (name, shape, " (buffer)" if buffer else ""))
PY
echo "== full IR: $OUT/lenet.mlir"
