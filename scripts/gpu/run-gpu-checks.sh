#!/usr/bin/env bash
# The GPU checks of a bundle made by scripts/gpu-bundle.sh: the GPU unit
# tests, then every case run with --backend cuda for 3 steps and its
# parameters compared with the CPU backend's (1e-4 absolute + relative,
# TF32 off). Prints 'N passed, N failed'; exits non-zero on a failure.
# Then the step-time tables of bench/gpu_gpt2.py and bench/gpu_step.py and
# gpu_step.py's memory table, where `prepare DIR` put them into this folder.
#
# Usage: run-gpu-checks.sh [checks] [gpt2] [step] [memory]
# (default: all four, in that order; a device call too short for all of
# them can run the checks and GPT-2 in one call and the rest in another).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
# Under the device tool, a copy of everything printed lands in $OUT, which
# comes back even when the call runs past its limit.
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  exec > >(tee -a "$OUT/gpu-checks.log") 2>&1
fi
TOL=${CDP_GPU_TOL:-1e-4}
# Each run is bounded, so that a hang (a wait nothing ends) fails its own
# check and the rest, the tables included, still run within one device call.
CASE_TIMEOUT=${CDP_GPU_CASE_TIMEOUT:-60}
bounded() { # seconds command...: the command, killed after the seconds
  local seconds=$1
  shift
  timeout --kill-after=5 "$seconds" "$@"
}
# Why a run failed: its log's last lines, or that it ran out of time.
failure() { # status log
  if [ "$1" = 124 ] || [ "$1" = 137 ]; then
    echo "timed out (a hang?): $(tail -2 "$2" | tr '\n' ' ')"
  else
    echo "cdp-run failed: $(tail -3 "$2" | tr '\n' ' ')"
  fi
}

# CUDA 13's libraries: the toolkit's, the system's (cuDNN, NCCL), else the
# NVIDIA wheels of an installed PyTorch.
cuda_dirs=""
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/lib/x86_64-linux-gnu /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
    /usr/local/lib/python3*/dist-packages/nvidia/*/lib; do
  [ -d "$dir" ] && cuda_dirs="$cuda_dirs:$dir"
done
# Libraries the bundle gzipped to fit a device carry, unpacked beside it.
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
for packed in "$HERE"/lib/*.gz; do
  [ -e "$packed" ] || continue
  target="$unpacked/$(basename "$packed" .gz)"
  gzip -dc "$packed" > "$target" 2> /dev/null ||
    python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), sys.stdout.buffer)' \
      "$packed" > "$target"
done
export LD_LIBRARY_PATH="$HERE/lib:$unpacked$cuda_dirs:${LD_LIBRARY_PATH:-}"
# The binaries, gzipped likewise, unpacked in place (once), so that the
# benches' scripts find DIR/bin/cdp-run.
for packed in "$HERE"/bin/*.gz; do
  [ -e "$packed" ] || continue
  target="${packed%.gz}"
  [ -x "$target" ] && continue
  { gzip -dc "$packed" > "$target.part" 2> /dev/null ||
    python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), sys.stdout.buffer)' \
      "$packed" > "$target.part"; } && chmod +x "$target.part" && mv "$target.part" "$target"
done
PYTHON=$(command -v python3 || true)

PARTS=" ${*:-checks gpt2 step memory} "
wants() { [[ "$PARTS" == *" $1 "* ]]; }

passed=0
failed=0
report() { # name status detail
  if [ "$2" = 0 ]; then
    passed=$((passed + 1))
    echo "PASS $1: $3"
  else
    failed=$((failed + 1))
    echo "FAIL $1: $3"
  fi
}

# A case's inputs into the array `feeds`: input and labels, or the names
# its feeds.txt lists (the transformers' input_ids, attention_mask, ...).
case_feeds() { # case_dir
  feeds=(--feed input="$1/x.npy" --feed labels="$1/labels.npy")
  if [ -f "$1/feeds.txt" ]; then
    feeds=()
    for feed in $(cat "$1/feeds.txt"); do
      feeds+=(--feed "$feed=$1/$feed.npy")
    done
  fi
}

# One case: its verdict line in $results/NAME ("0 detail" or "1 detail");
# with `graphs`, under --cuda-graphs (NAME-graphs), which must have replayed.
run_case() { # case_dir results [graphs]
  local case_dir=$1 name work nccl_debug feeds status detail flags=()
  name=$(basename "$case_dir")
  if [ "${3:-}" = graphs ]; then
    name="$name-graphs"
    flags=(--cuda-graphs)
  fi
  work=$(mktemp -d)
  # *-nccl cases must reduce through NCCL: its own log says it initialized.
  nccl_debug=""
  case "$name" in *-nccl) nccl_debug=INFO ;; esac
  case_feeds "$case_dir"
  NCCL_DEBUG=$nccl_debug bounded "$CASE_TIMEOUT" "$HERE/bin/cdp-run" \
    "$case_dir/plan.cdp" --backend cuda "${feeds[@]}" --steps 3 \
    --dump-params "$work/gpu" "${flags[@]}" > "$work/log" 2>&1
  status=$?
  if [ $status = 0 ]; then
    detail=$("$PYTHON" "$HERE/compare_params.py" "$case_dir/cpu" "$work/gpu" "$TOL")
    status=$?
    if [ -n "$nccl_debug" ] && ! grep -q "NCCL INFO" "$work/log"; then
      status=1
      detail="NCCL was not used: $detail"
    fi
    if [ ${#flags[@]} -gt 0 ]; then
      local graphs
      graphs=$(grep -- "--cuda-graphs:" "$work/log")
      if ! grep -qE "replayed [1-9]" <<< "$graphs"; then
        status=1
        detail="nothing replayed: ${graphs:-no --cuda-graphs line}; $detail"
      else
        detail="$detail; ${graphs#cdp-run: --cuda-graphs: }"
      fi
    fi
  else
    detail=$(failure $status "$work/log")
    status=1
  fi
  echo "$status $detail" > "$2/$name"
  rm -rf "$work"
}

# A kernel that faults (an illegal address) spoils the process's CUDA
# context, so every test after it fails too: each failed test again in a
# process of its own (at most 40, 20 s each) tells its own failures from
# those it caused, with the first lines of each real failure.
rerun_alone() {
  local names alone=0 failed=0
  names=$(grep -E '^\[  FAILED  \] [A-Za-z]' /tmp/cdp-unit.log |
    sed -E 's/^\[  FAILED  \] ([^ ,]+).*/\1/' | sort -u | head -40)
  [ -n "$names" ] || return 0
  echo "the failed GPU unit tests again, each in a process of its own:"
  for name in $names; do
    alone=$((alone + 1))
    if bounded 20 "$HERE/bin/CudaKernelTests" --gtest_brief=1 \
        --gtest_filter="$name" > /tmp/cdp-unit-alone.log 2>&1; then
      echo "  passes alone: $name"
    else
      failed=$((failed + 1))
      echo "  FAILS alone: $name"
      grep -E 'Failure|error|Expected|Which is|element|exception' \
        /tmp/cdp-unit-alone.log | head -4 | sed 's/^/      /'
    fi
  done
  echo "  $failed of $alone fail alone"
}

run_checks() {
  if [ -x "$HERE/bin/CudaKernelTests" ]; then
    bounded 300 "$HERE/bin/CudaKernelTests" --gtest_brief=1 > /tmp/cdp-unit.log 2>&1
    status=$?
    report "GPU unit tests" $status "$(grep -E 'PASSED|FAILED|SKIPPED' /tmp/cdp-unit.log | tr '\n' ' ')"
    [ $status = 0 ] || tail -30 /tmp/cdp-unit.log
    [ $status = 0 ] || rerun_alone
  fi

  # The cases, CDP_GPU_JOBS (4) at a time: separate processes sharing the GPU.
  results=$(mktemp -d)
  for case_dir in "$HERE"/cases/*/; do
    while [ "$(jobs -rp | wc -l)" -ge "${CDP_GPU_JOBS:-4}" ]; do wait -n; done
    run_case "$case_dir" "$results" &
  done
  # Steps recorded as CUDA graphs (--cuda-graphs): 3 steps are one run
  # kernel by kernel, one recording and one replay.
  for name in mlp-single resnet-single transformer-1f1b transformer-cdp4 \
      transformer-cdp-nccl lenet-fp16-dp hf-gpt2-ts-bf16 hf-llama-ts; do
    [ -d "$HERE/cases/$name" ] || continue
    while [ "$(jobs -rp | wc -l)" -ge "${CDP_GPU_JOBS:-4}" ]; do wait -n; done
    run_case "$HERE/cases/$name" "$results" graphs &
  done
  wait
  for verdict in "$results"/*; do
    read -r status detail < "$verdict"
    report "$(basename "$verdict")" "$status" "$detail"
  done
  rm -rf "$results"
  # A checkpoint holds the optimizer's moments, which live on the GPU, cdp's
  # reductions in flight (NCCL's, and the devices' links' blocks), ZeRO 3's
  # shard moments and an fp16 plan's update counts, which the device keeps:
  # training resumed from step 2 equals training straight through, bit for
  # bit. GPT-2's embeddings' gradients are summed in position order (no
  # atomic adds), so it resumes bit for bit too.
  for name in lenet-single lenet-dp resnet-1f1b transformer-cdp-nccl transformer-cdp4 \
      lenet-fp16-dp transformer-dp-zero3 hf-gpt2-ts; do
    case_dir="$HERE/cases/$name"
    [ -d "$case_dir" ] || continue
    work=$(mktemp -d)
    case_feeds "$case_dir"
    run=(bounded "$CASE_TIMEOUT" "$HERE/bin/cdp-run" "$case_dir/plan.cdp" --backend cuda "${feeds[@]}")
    "${run[@]}" --steps 4 --dump-params "$work/straight" > "$work/log" 2>&1 &&
      "${run[@]}" --steps 2 --checkpoint "$work/ck" >> "$work/log" 2>&1 &&
      "${run[@]}" --steps 4 --resume "$work/ck" --dump-params "$work/resumed" >> "$work/log" 2>&1
    status=$?
    if [ $status = 0 ]; then
      detail=$("$PYTHON" "$HERE/compare_params.py" "$work/straight" "$work/resumed" 0)
      report "$name resumed" $? "$detail"
    else
      report "$name resumed" 1 "$(failure $status "$work/log")"
    fi
    rm -rf "$work"
  done
  echo "$passed passed, $failed failed"
}

wants checks && run_checks
# The step-time tables, where bench/gpu_gpt2.py and bench/gpu_step.py were
# prepared into this folder (after the checks: a bench does not pass or
# fail); GPT-2 small first, the acceptance's model.
if wants gpt2 && [ -n "$PYTHON" ] && [ -f "$HERE/gpu_gpt2.py" ] && [ -f "$HERE/gpt2.json" ]; then
  bounded 240 "$PYTHON" "$HERE/gpu_gpt2.py" run "$HERE" || echo "gpu_gpt2.py run failed or timed out"
fi
if [ -n "$PYTHON" ] && [ -f "$HERE/gpu_step.py" ] && [ -d "$HERE/bench" ]; then
  if wants step; then
    bounded 360 "$PYTHON" "$HERE/gpu_step.py" run "$HERE" || echo "gpu_step.py run failed or timed out"
  fi
  if wants memory; then
    bounded 90 "$PYTHON" "$HERE/gpu_step.py" memory "$HERE" || echo "gpu_step.py memory failed or timed out"
  fi
fi
[ "$failed" = 0 ]
