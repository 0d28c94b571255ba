#!/usr/bin/env bash
# Everything one GPU session runs, in one folder that fits one 64 MiB
# device carry:
#
#   scripts/gpu-session.sh DIR
#
# scripts/gpu-bundle.sh's bundle (cdp-run built with CUDA, the GPU unit
# tests, the libraries, the checks' cases), bench/gpu_step.py's step-time
# cases, and GPT-2 small's (bench/gpu_gpt2.py, in the export venv
# bench/.venv-export that test/e2e/hf/make_hf_data.py makes; left out, with
# a note, where it is missing). On the GPU machine DIR/run-gpu-checks.sh
# runs the checks, then prints both step-time tables.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu-session.sh DIR}
scripts/gpu-bundle.sh "$OUT"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! /usr/bin/python3 bench/gpu_step.py prepare "$OUT" > "$log" 2>&1; then
  echo "gpu-session: bench/gpu_step.py prepare failed: $(tail -1 "$log")" >&2
  exit 1
fi
if [ -x bench/.venv-export/bin/python ]; then
  if ! bench/.venv-export/bin/python bench/gpu_gpt2.py prepare "$OUT" \
      --build "$(realpath "${CDP_BUILD_DIR:-build}")" > "$log" 2>&1; then
    echo "gpu-session: bench/gpu_gpt2.py prepare failed: $(tail -1 "$log")" >&2
    exit 1
  fi
else
  echo "gpu-session: note: no bench/.venv-export (test/e2e/hf/make_hf_data.py makes it): GPT-2's case left out" >&2
fi
size=$(du -sb "$OUT" | cut -f1)
if [ "$size" -gt $((64 << 20)) ]; then
  echo "gpu-session: $OUT is $((size >> 20)) MiB, over the 64 MiB of one device carry" >&2
  exit 1
fi
echo "gpu-session: $OUT ($((size >> 20)) MiB); carry it and run $OUT/run-gpu-checks.sh on the GPU machine"
