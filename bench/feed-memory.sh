#!/usr/bin/env bash
# The memory a large --feed costs: a 4 GiB float16 .npy of 134M samples of
# 16 features (a sparse file: no disk used) and uint8 labels, 100 steps of
# the 4-layer MLP, with and without --shuffle; prints cdp-run's peak
# resident memory (VmHWM, as /usr/bin/time reports it) and wall time.
# Usage: bench/feed-memory.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build}/bin
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
/usr/bin/python3 test/Import/make_models.py mlp4eq "$WORK/model.onnx"
/usr/bin/python3 - "$WORK" <<'PY'
import os, sys
import numpy as np
import numpy.lib.format as fmt
work = sys.argv[1]
n = (4 << 30) // (16 * 2)
for name, dtype, shape in [("x", np.float16, (n, 16)), ("y", np.uint8, (n,))]:
    with open(os.path.join(work, name + ".npy"), "wb") as out:
        fmt.write_array_header_1_0(out, {"descr": np.dtype(dtype).str,
                                         "fortran_order": False, "shape": shape})
        out.truncate(out.tell() + n * int(np.prod(shape[1:])) * np.dtype(dtype).itemsize)
print("feed: x float16 (%d, 16), %.2f GiB; labels uint8" %
      (n, os.path.getsize(os.path.join(work, "x.npy")) / 2**30))
PY
"$BIN/cdp-compile" "$WORK/model.onnx" -o "$WORK/p.cdp" --optimizer momentum > /dev/null
for flags in "" "--shuffle"; do
  /usr/bin/time -f "cdp-run ${flags:-(in order)}: peak resident %M KiB, %e s" \
    "$BIN/cdp-run" "$WORK/p.cdp" --feed x="$WORK/x.npy" --feed labels="$WORK/y.npy" \
    --steps 100 $flags > /dev/null
done
