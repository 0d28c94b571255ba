#!/usr/bin/python3
"""Peak memory per device of dense dp, the naive top-k baseline with an
explicit residual, Layrub-style reuse alone and LaySA.

Usage: bench/laysa_memory.py [--build build] [--models resnet,transformer,mlp]
                             [--devices 4] [--density 0.01]
Exports each e2e model (batch 8 per device), compiles the four
configurations and prints, for device 0:
  persistent  parameters, optimizer state, reduced means, mirror or residual
              (the report's categories; they live the whole run)
  arena       the plan's arena: every step-local tensor at its packed offset,
              laysa's communication buffers included (what cdp-run allocates)
  allocated   persistent + arena
  predicted   the --report's peak of live bytes (cdp-compile)
  measured    the same from one step of cdp-run --report on random data
and the allocated bytes against dense dp's.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
import export_torch_models as models  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import cdp_report  # noqa: E402  (reports with every device's row)

PERSISTENT = ["weight_bytes", "weight_version_bytes", "optimizer_bytes",
              "error_feedback_bytes", "reduction_bytes"]


def configurations(density):
    sparse = ["--strategy", "laysa", "--density", str(density)]
    return [("dense dp", ["--strategy", "dp"]),
            ("naive top-k + residual", sparse + ["--sparse-baseline", "residual"]),
            ("Layrub-style reuse only", ["--strategy", "dp", "--memory-reuse", "layer"]),
            ("laysa", sparse + ["--memory-reuse", "layer"])]


def figures(report):
    rows = [t["devices"][0] for t in report["time_steps"]]
    persistent = max(sum(row[k] for k in PERSISTENT) for row in rows)
    return persistent, report["arena_bytes"][0], report["peak"]["device_bytes"][0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--models", default="resnet,transformer,mlp")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--density", type=float, default=0.01)
    args = parser.parse_args()
    compile_bin = os.path.join(args.build, "bin", "cdp-compile")
    run_bin = os.path.join(args.build, "bin", "cdp-run")
    n = args.devices
    print("%-12s %-24s %11s %11s %11s %11s %11s %9s" % (
        "model", "configuration", "persistent", "arena", "allocated", "predicted", "measured",
        "vs dp"))
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            path = models.export(name, work)
            _, example, _ = models.build(name)
            axis = 1 if name == "transformer" else 0
            shape = list(example.shape)
            shape[axis] *= 2 * n
            x, y = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
            rng = np.random.RandomState(0)
            np.save(x, rng.randn(*shape).astype(np.float32))
            np.save(y, rng.randint(0, 10, size=shape[axis]).astype(np.int64))
            flags = ["--batch-axis", "input=1"] if name == "transformer" else []
            if name == "mlp":
                flags = ["--batch-size", str(example.shape[0])]
            dense = None
            for label, config in configurations(args.density):
                plan = os.path.join(work, "plan.cdp")
                predicted = os.path.join(work, "predicted.json")
                measured = os.path.join(work, "measured.json")
                subprocess.run([compile_bin, path, *flags, *config, "--devices", str(n),
                                "--steps", "2", "--report", predicted, "-o", plan],
                               check=True, stderr=subprocess.DEVNULL)
                subprocess.run([run_bin, plan, "--feed", "input=" + x, "--feed", "labels=" + y,
                                "--steps", "2", "--report", measured],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                persistent, arena, peak = figures(cdp_report.load(predicted))
                measured_peak = figures(cdp_report.load(measured))[2]
                allocated = persistent + arena
                dense = dense or allocated
                print("%-12s %-24s %11d %11d %11d %11d %11d %8.1f%%" % (
                    name, label, persistent, arena, allocated, peak, measured_peak,
                    100.0 * (allocated - dense) / dense))


if __name__ == "__main__":
    main()
