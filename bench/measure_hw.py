#!/usr/bin/python3
"""Measures this machine for cdp-compile's hardware model (--hw FILE.json).

Usage: bench/measure_hw.py [--build build] [-o hw.json]

One device of the CPU backend is one thread, so everything is measured on
one thread:

- flops_per_s: the best of several single-thread float32 matrix products
  (the forward Gemm of a one-layer training plan under cdp-run --profile:
  oneDNN, the kernels the plans run), as 2·m·n·k / seconds;
- memory_bandwidth_bytes_per_s: a single-thread copy of 64 MiB with numpy
  (bytes read plus bytes written over the time);
- link_bandwidth_bytes_per_s: the same copy, since in-process devices hand
  tensors over by copying them in memory;
- link_latency_s: left at cdp-compile's default (5e-6 s), not measured;
- memory_bytes: the machine's memory divided by the number of cores (a
  device's share).

Prints the JSON and writes it with -o.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "Import"))


def gemm_flops(build, work, m, k, n, steps=200):
    """FLOP/s of cdp-run's inference of one Gemm (m x k times k x n)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    # Weights of scale 1/sqrt(k) keep the logits near 1: wide logits make
    # softmax outputs denormal, and products of denormals run ~100 times
    # slower on x86.
    weight = numpy_helper.from_array(
        (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], name="gemm")], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(work, "gemm.onnx")
    open(path, "wb").write(model.SerializeToString())
    plan = os.path.join(work, "gemm.cdp")
    # A training plan: cdp-run --profile leaves out the first step (setup).
    subprocess.run([os.path.join(build, "bin", "cdp-compile"), path, "-o", plan], check=True)
    np.save(os.path.join(work, "x.npy"), rng.standard_normal((m * steps, k)).astype(np.float32))
    np.save(os.path.join(work, "y.npy"), rng.integers(0, n, m * steps))
    profile = os.path.join(work, "gemm.profile.json")
    subprocess.run([os.path.join(build, "bin", "cdp-run"), plan, "--feed",
                    "x=" + os.path.join(work, "x.npy"), "--feed",
                    "labels=" + os.path.join(work, "y.npy"), "--threads", "1",
                    "--steps", str(steps), "--profile", profile],
                   check=True, stdout=subprocess.DEVNULL)
    seconds = None
    for entry in json.load(open(profile))["instructions"]:
        if entry.get("op") == "gemm":  # forward and backward products
            seconds = min(seconds or float("inf"), entry["ms"] / 1e3)
    if seconds is None:
        raise SystemExit("measure_hw: %s has no gemm entry" % profile)
    return 2.0 * m * n * k / seconds


def copy_bandwidth(size=64 << 20, repeats=10):
    src = np.ones(size // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size / best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("-o", dest="output")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        flops = max(gemm_flops(args.build, work, *shape)
                    for shape in [(64, 256, 256), (256, 512, 512), (32, 128, 128)])
    bandwidth = copy_bandwidth()
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    hw = {"flops_per_s": float("%.3g" % flops),
          "memory_bytes": pages // os.cpu_count(),
          "memory_bandwidth_bytes_per_s": float("%.3g" % bandwidth),
          "link_bandwidth_bytes_per_s": float("%.3g" % bandwidth),
          "link_latency_s": 5e-6}
    text = json.dumps(hw, indent=1)
    print(text)
    if args.output:
        open(args.output, "w").write(text + "\n")


if __name__ == "__main__":
    main()
