#!/usr/bin/env bash
# Builds the tools and unit tests with AddressSanitizer and UBSan (clang-19)
# into build-fuzz/, the tree the fuzz targets use, and runs the lit and unit
# suites once on them: any sanitizer report fails its test. MPI and CUDA are
# off there (their tests report themselves unsupported).
# Usage: scripts/sanitize.sh [RESULTS.json]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${CDP_FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${CDP_JOBS:-$(nproc)}
RESULTS=${1:-$BUILD_DIR/test-results.json}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DCDP_FUZZ=ON -DCDP_SANITIZE=ON -DCDP_ENABLE_CUDA=OFF -DCDP_ENABLE_MPI=OFF >/dev/null
fi
ninja -C "$BUILD_DIR" -j "$JOBS" cdp-compile cdp-run cdp-opt cdp-unit-tests
# Leaks are not what these runs look for (protobuf, oneDNN and MLIR keep
# process-wide caches); every other report stops the process and fails.
# allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons the rest of a new
# slab when the code that starts it is instrumented (our instantiation of
# MLIR's storage templates) and unpoisons what it hands out, but Debian's
# libMLIR allocates from the same slab uninstrumented, so a later memcpy of
# an attribute it made reads "poisoned" memory: a false use-after-poison
# (seen once in Dialect/Sched/invalid.mlir, depending on the layout).
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
exec /usr/bin/python3 /usr/lib/llvm-19/build/utils/lit/lit.py -sv --order=lexical \
  -o "$RESULTS" "$BUILD_DIR/test" "$BUILD_DIR/test/unit"
