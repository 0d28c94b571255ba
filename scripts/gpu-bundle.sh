#!/usr/bin/env bash
# Builds the bundle that checks the CUDA backend on a GPU machine without
# this project's Debian dependencies:
#
#   scripts/gpu-bundle.sh DIR
#
# DIR gets bin/cdp-run (built with CUDA), lib/ (the non-CUDA shared
# libraries it needs: oneDNN, protobuf, ONNX's proto library, OpenMP, Open
# MPI), and cases/: the e2e models (MLP, LeNet, ResNet with
# BatchNorm, transformer block) compiled for single, dp, cdp, gpipe, 1f1b and
# 2bw (2 devices, which share the one GPU), dp and cdp on one device
# (their reductions through NCCL), and the transformer under ZeRO stages
# 1-3, CDP-ZeRO and laysa (its mirror and the residual baseline), and the
# committed Hugging Face and LSTM exports of test/e2e/hf, each with small
# .npy inputs and the CPU backend's parameters after 3 steps.
# The binaries and libraries over 4 MiB (oneDNN) are gzipped: the bundle
# must fit the 64 MiB a device carry takes, and the check script unpacks
# them. DIR/run-gpu-checks.sh finds
# the machine's CUDA 13 libraries (its toolkit, or the NVIDIA wheels of its
# PyTorch), runs every case with --backend cuda and the GPU unit tests, and
# prints 'N passed, N failed'.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu-bundle.sh DIR}
BUILD_DIR=${CDP_BUILD_DIR:-build}
BIN="$BUILD_DIR/bin"
# grep reads all of ldd's output: with pipefail, grep -q exiting at the
# first match could kill ldd with SIGPIPE and fail the test on a loaded
# machine ("built without CUDA" on a CUDA build, seen once in the suite).
if ! ldd "$BIN/cdp-run" | grep libcudart > /dev/null; then
  echo "gpu-bundle: $BIN/cdp-run was built without CUDA (configure with the toolkit under /usr/local/cuda)" >&2
  exit 1
fi
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/cases"
cp "$BIN/cdp-run" "$OUT/bin/"
[ -x "$BUILD_DIR/test/unit/CudaKernelTests" ] && cp "$BUILD_DIR/test/unit/CudaKernelTests" "$OUT/bin/"
strip --strip-unneeded "$OUT"/bin/* # symbols are not needed there; size is

# Shared libraries beside the C library and CUDA's own (the GPU machine has
# those, matched to its driver).
for binary in "$OUT"/bin/*; do
  ldd "$binary" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
    libstdc++.so*|libgcc_s.so*) ;; # every newer distribution has them
    libcuda*|libcublas*|libcudnn*|libnccl*|libcudart*) ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
find "$OUT/lib" -type f -size +4M -exec gzip -6 {} +
# The binaries too (two thirds of their bytes): run-gpu-checks.sh unpacks
# them in place before anything runs.
gzip -6 "$OUT"/bin/*

MODELS=$(mktemp -d)
trap 'rm -rf "$MODELS"' EXIT
/usr/bin/python3 test/e2e/export_torch_models.py "$MODELS" mlp lenet resnet transformer > /dev/null 2>&1

# model: compile flags, input shape of one micro-batch, its batch axis.
# Adam runs on LeNet, not on the transformer: attention's key bias has an
# exactly zero gradient, whose rounding noise Adam scales up to lr-sized
# steps of either sign on either backend.
declare -A FLAGS=(
  [mlp]="--batch-size 8 --optimizer momentum --lr 0.05"
  [lenet]="--optimizer adam --lr 0.001"
  [resnet]="--optimizer momentum --lr 0.05"
  [transformer]="--batch-axis input=1 --optimizer momentum --lr 0.05"
)
declare -A SHAPE=([mlp]=8,784 [lenet]=8,1,28,28 [resnet]=8,1,28,28 [transformer]=6,8,32)
declare -A AXIS=([mlp]=0 [lenet]=0 [resnet]=0 [transformer]=1)
# Gradient clipping on two cases, so the GPU's clip kernels run: the mean
# clipped (dp) and the stages' shares exchanged (1f1b).
declare -A EXTRA=([lenet-dp]="--clip-grad-norm 0.3" [lenet-1f1b]="--clip-grad-norm 0.3")
# A case: its name, model and strategy flags; compiled, fed and run on the
# CPU backend for its reference parameters.
add_case() {
  local name=$1 model=$2
  shift 2
  local case_dir="$OUT/cases/$name"
  mkdir -p "$case_dir"
  # shellcheck disable=SC2086
  if ! "$BIN/cdp-compile" "$MODELS/$model.onnx" -o "$case_dir/plan.cdp" \
      "$@" ${FLAGS[$model]} 2> "$case_dir/compile.log"; then
    echo "gpu-bundle: skipped $name: $(head -1 "$case_dir/compile.log")" >&2
    rm -rf "$case_dir"
    return
  fi
  rm "$case_dir/compile.log"
  /usr/bin/python3 scripts/gpu/make_inputs.py "$case_dir" "${SHAPE[$model]}" "${AXIS[$model]}" 3 10 7
  "$BIN/cdp-run" "$case_dir/plan.cdp" --feed input="$case_dir/x.npy" \
    --feed labels="$case_dir/labels.npy" --steps 3 --dump-params "$case_dir/cpu" > /dev/null
}

for model in mlp lenet resnet transformer; do
  for strategy in single dp cdp gpipe 1f1b 2bw; do
    devices=2 stages=""
    [ "$strategy" = single ] && devices=1
    case "$strategy" in gpipe|1f1b|2bw) stages="--stages 2" ;; esac
    # shellcheck disable=SC2086
    add_case "$model-$strategy" "$model" --strategy "$strategy" \
      --devices "$devices" $stages ${EXTRA[$model-$strategy]:-}
  done
done

# ZeRO's sharded updates and gathers, laysa's exchange, the replicas'
# gradient sums (host-staged until 2026-11-30/12-01): the transformer's plans
# are the smallest. Clipped, so that stages 2 and 3 sum the devices' shares
# of the norm (norm_all_reduce, through the devices' links since 2026-12-01).
for zero in 1 2 3; do
  add_case "transformer-dp-zero$zero" transformer --strategy dp --devices 2 \
    --zero "$zero" --clip-grad-norm 0.3
done
# ZeRO 1 over a replicated pipeline's replicas (replica_shard_update: the
# updated shards as device messages since 2026-12-01).
add_case transformer-1f1b-replicas-zero1 transformer --strategy 1f1b --stages 2 \
  --replicas 2 --devices 4 --zero 1
add_case transformer-cdp-zero3 transformer --strategy cdp --devices 2 --zero 3 --cdp-rule v1
add_case transformer-laysa transformer --strategy laysa --devices 2
# Four devices sharing the one GPU: cdp's reductions (all-reduce and chain),
# 1f1b's sends and ZeRO 3's reduce-scatter and all-gather stay in GPU memory (each device's link:
# device-to-device copies and sums on the GPU, ordered by events).
add_case transformer-cdp4 transformer --strategy cdp --devices 4
add_case transformer-cdp4-chain transformer --strategy cdp --devices 4 \
  --cdp-rule v1 --cdp-reduce chain
add_case resnet-cdp4 resnet --strategy cdp --devices 4
add_case lenet-1f1b4 lenet --strategy 1f1b --stages 4 --micro-batches 2
add_case transformer-dp4-zero3 transformer --strategy dp --devices 4 --zero 3
# A replicated pipeline: its gradient sums over the replicas (replica_sum).
add_case transformer-1f1b-replicas transformer --strategy 1f1b --stages 2 \
  --replicas 2 --devices 4
add_case transformer-laysa-residual transformer --strategy laysa --devices 2 \
  --sparse-baseline residual

# dp and cdp on one device: a communicator of one, whose reductions go
# through NCCL (one rank), the path several GPUs take.
for model in resnet transformer; do
  for strategy in dp cdp; do
    add_case "$model-$strategy-nccl" "$model" --strategy "$strategy" --devices 1
  done
done

# Transformers and recurrent models from today's exporters (the committed
# exports of test/e2e/hf): their new ops (where, comparisons, the gathers,
# sin/cos, unrolled LSTM) against the CPU backend, single and dp.
add_hf_case() {
  local name=$1 data=test/e2e/hf/data/$2
  shift 2
  local case_dir="$OUT/cases/$name"
  mkdir -p "$case_dir"
  "$BIN/cdp-compile" "$data/model.onnx" -o "$case_dir/plan.cdp" --class-axis last \
    --trainable-from "$data/trainable.txt" --lr 0.1 "$@" 2> /dev/null || {
    echo "gpu-bundle: skipped $name" >&2
    rm -rf "$case_dir"
    return
  }
  local feeds
  feeds="$(cat "$data/inputs.txt") labels"
  echo "$feeds" > "$case_dir/feeds.txt"
  local args=()
  for feed in $feeds; do
    cp "$data/$feed.npy" "$case_dir/"
    args+=(--feed "$feed=$case_dir/$feed.npy")
  done
  "$BIN/cdp-run" "$case_dir/plan.cdp" "${args[@]}" --steps 3 \
    --dump-params "$case_dir/cpu" > /dev/null
}
for model in gpt2-ts llama-ts bert-ts t5-ts lstm-ts; do
  add_hf_case "hf-$model" "$model"
done
add_hf_case hf-llama-ts-dp llama-ts --strategy dp --devices 2
# --precision bf16: the roundings (round_to) and the products on tensor
# cores (narrow_operands) on the GPU against the CPU's; under 1f1b its
# stages send each other packed bf16 values through the devices' links.
add_hf_case hf-gpt2-ts-bf16 gpt2-ts --precision bf16
add_hf_case hf-gpt2-ts-bf16-1f1b gpt2-ts --precision bf16 --strategy 1f1b \
  --stages 2 --micro-batches 2
add_case resnet-bf16 resnet --precision bf16
# --precision fp16: the loss scale's kernels and the updates' skip (LeNet
# from 2^20, doubling after every clean step, so that steps overflow).
add_hf_case hf-gpt2-ts-fp16 gpt2-ts --precision fp16
add_case lenet-fp16-dp lenet --precision fp16 --strategy dp --devices 2 \
  --loss-scale 1048576 --loss-scale-interval 1
# The stages' overflow flags (found_inf, unscale_grads with flags).
add_case lenet-fp16-1f1b lenet --precision fp16 --strategy 1f1b --stages 2 \
  --micro-batches 2 --loss-scale 1048576 --loss-scale-interval 1

cp scripts/gpu/compare_params.py "$OUT/"
cp scripts/gpu/run-gpu-checks.sh "$OUT/"
size=$(du -sb "$OUT" | cut -f1)
if [ "$size" -gt $((64 << 20)) ]; then
  echo "gpu-bundle: warning: $OUT is $((size >> 20)) MiB, over the 64 MiB a device carry takes" >&2
fi
echo "gpu-bundle: $OUT ($(du -sh "$OUT" | cut -f1), $(ls "$OUT/cases" | wc -l) cases); run $OUT/run-gpu-checks.sh on the GPU machine"
