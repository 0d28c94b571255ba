#!/usr/bin/env bash
# Configures (once) and builds cdp into build/ with Ninja.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${CDP_BUILD_DIR:-build}
JOBS=${CDP_JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
fi
ninja -C "$BUILD_DIR" -j "$JOBS"
