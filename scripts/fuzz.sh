#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-19, ASan + UBSan) into build-fuzz/ and
# runs each for SECONDS on seed corpora made from the tests' inputs; ends
# with one line per target: executions, and "no finding" or the crash file.
# Usage: scripts/fuzz.sh SECONDS [TARGET...]
#   TARGET: PlanFuzzer ArrayFuzzer IdxFuzzer JsonFuzzer OnnxFuzzer (default all)
# CDP_FUZZ_SEED=N makes a run repeatable (CI uses 1); unset, each run differs.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:?usage: scripts/fuzz.sh SECONDS [TARGET...]}
shift
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(PlanFuzzer ArrayFuzzer IdxFuzzer JsonFuzzer OnnxFuzzer)
BUILD_DIR=${CDP_FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${CDP_JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DCDP_FUZZ=ON -DCDP_SANITIZE=ON -DCDP_ENABLE_CUDA=OFF -DCDP_ENABLE_MPI=OFF >/dev/null
fi
ninja -C "$BUILD_DIR" -j "$JOBS" cdp-compile "${TARGETS[@]}"
CORPUS="$BUILD_DIR/fuzz-corpus"
/usr/bin/python3 test/fuzz/make_seeds.py "$CORPUS" "$BUILD_DIR/bin/cdp-compile"
# Leaks are not what the targets look for (protobuf and oneDNN keep
# process-wide caches); every other ASan and UBSan report is a finding.
# allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons the rest of a new
# slab when the code that starts it is instrumented (our instantiation of
# MLIR's storage templates) and unpoisons what it hands out, but Debian's
# libMLIR allocates from the same slab uninstrumented, so a later memcpy of
# an attribute it made reads "poisoned" memory: a false use-after-poison
# (seen once in Dialect/Sched/invalid.mlir, depending on the layout).
export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:allow_user_poisoning=0
status=0
for target in "${TARGETS[@]}"; do
  mkdir -p "$CORPUS/$target.run" "$BUILD_DIR/fuzz-findings"
  log="$BUILD_DIR/fuzz-findings/$target.log"
  if "$BUILD_DIR/bin/$target" -max_total_time="$SECONDS_EACH" -timeout=20 \
       -rss_limit_mb=2560 -print_final_stats=1 -seed="${CDP_FUZZ_SEED:-0}" \
       -artifact_prefix="$BUILD_DIR/fuzz-findings/$target-" \
       "$CORPUS/$target.run" "$CORPUS/$target" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz: $target: $runs executions in ${SECONDS_EACH}s, no finding"
  else
    echo "fuzz: $target: FINDING (see $log and $BUILD_DIR/fuzz-findings/$target-*)"
    status=1
  fi
done
exit $status
