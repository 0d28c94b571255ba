#!/usr/bin/python3
"""Seed corpora for the fuzz targets, from the tests' own inputs: ONNX
models of test/Import/make_models.py (OnnxFuzzer), plans compiled from
them under several strategies (PlanFuzzer, payload only), .npy and .pb
feeds (ArrayFuzzer), a small IDX data set (IdxFuzzer) and --profile/--hw
JSON (JsonFuzzer); and every input a fuzzer once failed on
(test/fuzz/regressions/TARGET/), so each run replays them first.

Usage: make_seeds.py CORPUS_DIR CDP_COMPILE
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ["mlp4tied", "conv", "maxpool", "layernormalization", "gather", "concat", "slice",
          "transpose", "softmaxcrossentropyloss", "batchnormalization", "matmul", "reshape"]
STRATEGIES = [[], ["--strategy", "dp", "--devices", "2"],
              ["--strategy", "cdp", "--devices", "2", "--cdp-reduce", "chain", "--cdp-rule", "v1"],
              ["--strategy", "1f1b", "--stages", "2", "--micro-batches", "2"],
              ["--strategy", "dp", "--devices", "2", "--zero", "3", "--optimizer", "adam"],
              ["--strategy", "cdp", "--devices", "3", "--zero", "3", "--cdp-rule", "v1",
               "--optimizer", "adam"],
              ["--strategy", "gpipe", "--stages", "2", "--micro-batches", "2", "--replicas", "2",
               "--devices", "4", "--zero", "1", "--optimizer", "momentum"]]


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def main():
    corpus, compile_bin = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            onnx_path = os.path.join(tmp, model + ".onnx")
            made = subprocess.run([sys.executable, os.path.join(ROOT, "test/Import/make_models.py"),
                                   model, onnx_path], capture_output=True)
            if made.returncode != 0:
                continue
            write(os.path.join(corpus, "OnnxFuzzer"), model, open(onnx_path, "rb").read())
            for n, flags in enumerate(STRATEGIES):
                plan = os.path.join(tmp, "%s-%d.cdp" % (model, n))
                if subprocess.run([compile_bin, onnx_path, "-o", plan] + flags,
                                  capture_output=True).returncode == 0:
                    write(os.path.join(corpus, "PlanFuzzer"), "%s-%d" % (model, n),
                          open(plan, "rb").read()[32:])
        rng = np.random.default_rng(0)
        for name, array in [("f32", rng.standard_normal((4, 3)).astype(np.float32)),
                            ("f64", rng.standard_normal((2, 2))), ("i64", np.arange(5)),
                            ("i32", np.arange(3, dtype=np.int32)), ("bool", np.array([True, False]))]:
            path = os.path.join(tmp, name + ".npy")
            np.save(path, array)
            write(os.path.join(corpus, "ArrayFuzzer"), name + ".npy", b"\0" + open(path, "rb").read())
            if array.dtype != np.int32:
                proto = numpy_helper.from_array(array.astype(np.float32) if name == "f64" else array)
                write(os.path.join(corpus, "ArrayFuzzer"), name + ".pb", b"\1" + proto.SerializeToString())
    images = struct.pack(">IIII", 0x803, 2, 2, 2) + bytes(range(8))
    labels = struct.pack(">II", 0x801, 2) + bytes([1, 0])
    write(os.path.join(corpus, "IdxFuzzer"), "two", struct.pack("<H", len(images)) + images + labels)
    profile = {"instructions": [{"location": "fc0", "op": "gemm", "ms": 0.5},
                                {"location": "fc1", "op": "tanh", "ms": 0.1}]}
    hw = {"flops_per_s": 1e12, "memory_bytes": 8e9, "link_latency_s": 1e-6}
    write(os.path.join(corpus, "JsonFuzzer"), "profile", json.dumps(profile).encode())
    write(os.path.join(corpus, "JsonFuzzer"), "hw", json.dumps(hw).encode())
    regressions = os.path.join(ROOT, "test", "fuzz", "regressions")
    for target in os.listdir(regressions):
        for name in os.listdir(os.path.join(regressions, target)):
            os.makedirs(os.path.join(corpus, target), exist_ok=True)
            shutil.copy(os.path.join(regressions, target, name),
                        os.path.join(corpus, target, "regression-" + name))


if __name__ == "__main__":
    main()
