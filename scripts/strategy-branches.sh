#!/usr/bin/env bash
# Counts the places that branch on a strategy outside the schedule library
# (runtime/schedule/, include/cdp/Schedule/): trait reads, Strategy::
# enumerators compared, strategy-name comparisons, and tests of the features (ZeRO,
# laysa's sparse exchange, memory reuse) by flag. Issue 40 asks these to
# reach zero; the commit messages that move them quote the counts. Also
# counted, apart: reads of the plan form (Strategy.h's PlanForm: single,
# replicated or pipeline), which is what the emitter, the runtime and the
# pass pipeline branch on instead of the strategy.
#
# Usage: scripts/strategy-branches.sh [--files]
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files compiler passes runtime tools include |
  grep -E '\.(cpp|h|cu)$' | grep -v -E '^(runtime/schedule/|include/cdp/Schedule/)')
traits='traitsOf\(|(\.|->)(dataParallel|pipelined|cyclic|flushes|replicable|weightVersions|ordersStages|autoPlans|stash|checkShape|oneDevice|zeroStages|sparseExchange)\b|cyclicPipeline\(\)|traits(->|\.)table'
enums='([=!]= *|case )Strategy::[A-Z][A-Za-z0-9]*'
names='(strategy|Strategy\(\))[^;]{0,20}(==|!=) *"[a-z0-9-]+"'
features='(if|while|\?|&&|\|\|).{0,40}\b(zero|zeroStage|laysa|sparse|isLaySA|layerReuse|memoryReuse)\b'
forms='planForm\(|formOf\(|isPipeline\(|isReplicated\(|\.form\(\)'
count() { grep -E -o "$1" "${files[@]}" | wc -l; }
echo "trait reads:    $(count "$traits")"
echo "enumerators:    $(count "$enums")"
echo "name tests:     $(count "$names")"
echo "plan-form reads: $(count "$forms")"
echo "feature tests:  $(grep -E -c "$features" "${files[@]}" | awk -F: '{s += $2} END {print s}')"
if [[ "${1:-}" == --files ]]; then
  grep -E -c "$traits|$enums|$names|$features" "${files[@]}" | grep -v ':0$' |
    sort -t: -k2 -rn
fi
