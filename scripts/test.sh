#!/usr/bin/env bash
# The README's second command: sets up, builds, and runs every test (lit
# tests of the dialect, importer and tools; end-to-end tests; GoogleTest
# units). Ends with one line "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
BUILD_DIR=${CDP_BUILD_DIR:-build}
LIT=/usr/lib/llvm-19/build/utils/lit/lit.py

results="$BUILD_DIR/test-results.json"
status=0
/usr/bin/python3 "$LIT" -sv --order=lexical -o "$results" \
  "$BUILD_DIR/test" "$BUILD_DIR/test/unit" || status=$?

# Every fuzz target for a bounded, repeatable time (ASan + UBSan, clang-19).
CDP_FUZZ_SEED=1 ./scripts/fuzz.sh "${CDP_FUZZ_SECONDS:-15}" | grep '^fuzz:' || status=1

/usr/bin/python3 - "$results" <<'PY'
import json, sys
tests = json.load(open(sys.argv[1]))["tests"]
good = {"PASS", "XFAIL"}
passed = sum(t["code"] in good for t in tests)
failed = len(tests) - passed
for t in tests:
    if t["code"] not in good:
        print("  %s: %s" % (t["code"], t["name"]))
print("%d passed, %d failed" % (passed, failed))
PY
exit $status
