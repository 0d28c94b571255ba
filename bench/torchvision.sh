#!/usr/bin/env bash
# Every torchvision model of the real-model check (15, about 4 minutes on
# 2 cores): one SGD step in cdp against PyTorch float32 and float64, one
# line per model. The suite runs a subset (test/e2e/torchvision.test);
# docs/results.md has the latest output.
# Usage: bench/torchvision.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-${CDP_BUILD_DIR:-build}}
WORK=${2:-$(mktemp -d)}
exec /usr/bin/python3 -W ignore test/e2e/torchvision_check.py "$BUILD_DIR/bin" "$WORK" \
  resnet18 resnet50 mobilenet_v2 mobilenet_v3_small squeezenet1_0 shufflenet_v2_x0_5 \
  densenet121 efficientnet_b0 vgg11_bn alexnet googlenet regnet_y_400mf mnasnet0_5 \
  convnext_tiny vit_b_16 2> >(grep -v "Warning\|_C._jit\|^ *$" >&2)
