#!/usr/bin/env bash
# Installs every Debian package cdp needs. Idempotent: when everything is
# present it only checks and returns.
set -euo pipefail

PACKAGES=(
  # Compiler: MLIR/LLVM 19 out of tree (libzstd-dev: LLVMSupport's link needs it).
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools libzstd-dev zlib1g-dev
  # ONNX import and the plan artefact.
  libonnx-dev libprotobuf-dev protobuf-compiler
  # The runtime's JSON (reports, traces, metrics) is read and written with it.
  nlohmann-json3-dev
  # CPU kernels (oneDNN's CMake config needs the OpenCL headers).
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev
  # Multi-process backend (later issues).
  libopenmpi-dev openmpi-bin
  # Build and tests.
  cmake ninja-build g++ libgtest-dev libgmock-dev clang-format-19
  # Fuzzing and the sanitizer run: libFuzzer, ASan and UBSan.
  clang-19 libclang-rt-19-dev libomp-19-dev
  # Tests, examples and benchmarks use Debian's python3 with these.
  python3 python3-onnx python3-numpy python3-torch python3-torchvision
  # The example data set.
  dataset-fashion-mnist
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep "install ok installed" >/dev/null; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
