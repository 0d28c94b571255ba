#!/usr/bin/env bash
# Writes the plan text (cdp-compile --emit=plan-text) of every strategy on
# the end-to-end models into DIR, one file per model and configuration, so
# that a change to the compiler can be checked to emit the same instruction
# streams: run it before and after, then `diff -r BEFORE AFTER`.
# Usage: scripts/plan-snapshots.sh DIR [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/plan-snapshots.sh DIR [BUILD_DIR]}
BUILD_DIR=${2:-${CDP_BUILD_DIR:-build}}
COMPILE="$(realpath "$BUILD_DIR/bin/cdp-compile")"
mkdir -p "$OUT/models"
/usr/bin/python3 -W ignore test/e2e/export_torch_models.py "$OUT/models" \
  mlp lenet resnet transformer >/dev/null 2>&1
/usr/bin/python3 test/Import/make_models.py mlp4tied "$OUT/models/tied.onnx"

configs=(
  "single:--micro-batches 2"
  "dp:--strategy dp --devices 4 --stages 2"
  "cdp-v1:--strategy cdp --devices 4 --stages 2 --cdp-rule v1"
  "cdp-v2:--strategy cdp --devices 4 --stages 2"
  "cdp-chain:--strategy cdp --devices 2 --stages 2 --cdp-rule v1 --cdp-reduce chain"
  "gpipe:--strategy gpipe --stages 2 --devices 2 --micro-batches 4"
  "1f1b:--strategy 1f1b --stages 2 --devices 2 --micro-batches 4"
  "2bw:--strategy 2bw --stages 2 --devices 2 --micro-batches 4"
  "gpipe-r2:--strategy gpipe --stages 2 --replicas 2 --devices 4 --micro-batches 2"
  "cdp-mp:--strategy cdp-mp --stages 2 --micro-batches 4"
  "cdp-mp-n3:--strategy cdp-mp --stages 2 --micro-batches 3"
  "interleaved-1f1b:--strategy interleaved-1f1b --stages 4 --devices 2 --micro-batches 4"
  "zb-h1:--strategy zb-h1 --stages 2 --devices 2 --micro-batches 4"
  "dp-zero1:--strategy dp --devices 2 --stages 2 --zero 1"
  "dp-zero2:--strategy dp --devices 2 --stages 2 --zero 2"
  "dp-zero3:--strategy dp --devices 2 --stages 2 --zero 3"
  "cdp-zero3:--strategy cdp --devices 2 --stages 2 --cdp-rule v1 --zero 3"
  "laysa:--strategy laysa --devices 2 --stages 2"
  "laysa-residual:--strategy laysa --devices 2 --stages 2 --sparse-baseline residual"
  "single-reuse:--memory-reuse layer"
  "1f1b-reuse:--strategy 1f1b --stages 2 --devices 2 --micro-batches 4 --memory-reuse layer"
  "adam-clip:--strategy dp --devices 2 --optimizer adam --clip-grad-norm 1"
  "1f1b-r3-zero1:--strategy 1f1b --stages 2 --replicas 3 --devices 6 --micro-batches 2 --zero 1"
  "1f1b-r2-clip:--strategy 1f1b --stages 2 --replicas 2 --devices 4 --micro-batches 2 --clip-grad-norm 0.5"
  "2bw-r3:--strategy 2bw --stages 2 --replicas 3 --devices 6 --micro-batches 2"
  "2bw-r2-clip:--strategy 2bw --stages 2 --replicas 2 --devices 4 --micro-batches 2 --clip-grad-norm 0.5"
  "zb-h1-r2:--strategy zb-h1 --stages 2 --replicas 2 --devices 4 --micro-batches 4"
  "zb-v-r2:--strategy zb-v --stages 4 --replicas 2 --devices 4 --micro-batches 4"
  "interleaved-1f1b-r2:--strategy interleaved-1f1b --stages 4 --replicas 2 --devices 4 --micro-batches 4"
  "1f1b-r2-reuse:--strategy 1f1b --stages 2 --replicas 2 --devices 4 --micro-batches 2 --memory-reuse layer"
  "1f1b-schedule:--strategy 1f1b --stages 2 --devices 2 --micro-batches 4 --schedule SCHEDULE"
)
# --schedule's input: gpipe's order (a schedule CSV), so that 1f1b follows
# a table other than its own.
SCHEDULE=models/gpipe-schedule.csv
# Models by a path relative to DIR: a plan's locations name the model, and
# two snapshot folders must compare equal.
cd "$OUT"
for model in models/*.onnx; do
  name=$(basename "$model" .onnx)
  for config in "${configs[@]}"; do
    label=${config%%:*}
    batch=()
    [ "$name" = mlp ] && batch=(--batch-size 8) # its batch is symbolic
    [ "$name" = transformer ] && batch=(--batch-axis input=1) # (S, N, E)
    flags=${config#*:}
    if [[ $flags == *SCHEDULE* ]]; then
      "$COMPILE" "$model" "${batch[@]}" --strategy gpipe --stages 2 --devices 2 \
        --micro-batches 4 --emit=schedule-csv -o "$SCHEDULE" >/dev/null 2>&1 || true
      flags=${flags/SCHEDULE/$SCHEDULE}
    fi
    # --optimizer comes first: a configuration's own (adam-clip) wins.
    # shellcheck disable=SC2086
    if ! "$COMPILE" "$model" "${batch[@]}" --optimizer momentum \
         $flags --emit=plan-text -o "$name-$label.txt" \
         >/dev/null 2>"$name-$label.err"; then
      echo "$name $label: $(head -1 "$name-$label.err")"
    fi
    [ -s "$name-$label.err" ] || rm -f "$name-$label.err"
  done
done
echo "$(find . -maxdepth 1 -name '*.txt' | wc -l) plan texts in $OUT"
