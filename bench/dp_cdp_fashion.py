#!/usr/bin/python3
"""DP against CDP-v1 and CDP-v2 on Fashion-MNIST (the issue's benchmark).

Usage: bench/dp_cdp_fashion.py [--build build] [--epochs 3] [--out bench/out]

Trains the LeNet-style CNN (batch B = 8 per device) with N = 4 devices and
L = 4 stages (cost model) for E epochs under dp, cdp v1 and cdp v2 (timing
table), SGD with momentum 0.9 and lr 0.01 (--lr), same seed, and prints test
accuracy, step time, peak activation bytes (all devices) and peak device
bytes from cdp-run's measured report of the first steps; writes the report
SVG of dp overlaid on cdp-v2. The 4 devices are threads sharing this
machine's cores, so step times measure the runtime, not a cluster.
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
import export_torch_models as models  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--out", default=os.path.join(HERE, "out"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = models.export("lenet", args.out)
    compile_ = os.path.join(args.build, "bin", "cdp-compile")
    run = os.path.join(args.build, "bin", "cdp-run")
    configs = [("dp", ["--strategy", "dp"]),
               ("cdp-v1", ["--strategy", "cdp", "--cdp-rule", "v1"]),
               ("cdp-v2", ["--strategy", "cdp", "--cdp-rule", "v2", "--v2-table", "timing"])]
    print("LeNet-style CNN, Fashion-MNIST, N = 4 devices, L = 4 stages, B = 8, "
          "%d epochs, momentum 0.9, lr %g" % (args.epochs, args.lr))
    print("%-8s %9s %12s %16s %16s" % ("rule", "accuracy", "ms/step", "peak act. bytes",
                                       "peak dev. bytes"))
    for name, flags in configs:
        plan = os.path.join(args.out, name + ".cdp")
        subprocess.run([compile_, path, "-o", plan, "--devices", "4", "--stages", "4",
                        "--optimizer", "momentum", "--lr", str(args.lr)] + flags, check=True)
        report = os.path.join(args.out, name + "-report.json")
        extra = []
        if name == "cdp-v2":
            extra = ["--report-svg", os.path.join(args.out, "dp-vs-cdp.svg"),
                     "--compare-report", os.path.join(args.out, "dp-report.json")]
        out = subprocess.run([run, plan, "--data", "fashion-mnist", "--epochs", str(args.epochs),
                              "--eval", "--seed", "1", "--report", report, "--report-steps", "4",
                              "--metrics", os.path.join(args.out, name + ".jsonl")] + extra,
                             check=True, capture_output=True, text=True).stdout
        match = re.search(r"(\d+) steps, loss [0-9.]+, ([0-9.]+) s, test accuracy ([0-9.]+)", out)
        steps, seconds, accuracy = int(match.group(1)), float(match.group(2)), float(match.group(3))
        peak = json.load(open(report))["peak"]
        print("%-8s %9.4f %12.3f %16d %16d" % (name, accuracy, 1e3 * seconds / steps,
                                               peak["activation_bytes"], max(peak["device_bytes"])))


if __name__ == "__main__":
    main()
