#!/usr/bin/env bash
# The README's second command: sets up, builds, and runs every test (lit
# tests of the dialect, importer and tools; end-to-end tests; GoogleTest
# units), then the same suites under ASan + UBSan and the fuzz targets.
# Ends with one line "N passed, N failed".
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

# The same suites once more on tools built with ASan + UBSan (clang-19),
# then every fuzz target for a bounded, repeatable time on that tree.
sanitized="$BUILD_DIR/sanitized-results.json"
echo "== the suites under ASan + UBSan (build-fuzz/)"
./scripts/sanitize.sh "$sanitized" > "$BUILD_DIR/sanitized.log" 2>&1 || status=1
fuzzed="$BUILD_DIR/fuzz-results.txt"
CDP_FUZZ_SEED=1 ./scripts/fuzz.sh "${CDP_FUZZ_SECONDS:-15}" | grep '^fuzz:' | tee "$fuzzed" || status=1

# A fuzz target's finding counts as a failure in the last line too (it
# used to show only in the exit status).
/usr/bin/python3 - "$results" "$sanitized" "$fuzzed" <<'PY'
import json, os, sys
good, skipped = {"PASS", "XFAIL"}, {"UNSUPPORTED", "SKIPPED"}
passed = failed = unrun = 0
for line in open(sys.argv[3]) if os.path.exists(sys.argv[3]) else []:
    if "FINDING" in line:
        failed += 1
        print("  FAIL: %s" % line.strip())
    elif "no finding" in line:
        passed += 1
for path, prefix in zip(sys.argv[1:3], ["", "sanitized: "]):
    if not os.path.exists(path):
        print("  FAIL: %sno results (%s)" % (prefix, path))
        failed += 1
        continue
    for t in json.load(open(path))["tests"]:
        if t["code"] in good:
            passed += 1
        elif t["code"] in skipped:
            unrun += 1
        else:
            failed += 1
            print("  %s: %s%s" % (t["code"], prefix, t["name"]))
print("%d unsupported here (their REQUIRES not met)" % unrun)
print("%d passed, %d failed" % (passed, failed))
PY
exit $status
