#!/usr/bin/python3
"""Model-state traffic of DP-ZeRO-3 (collectives) against CDP-ZeRO-3
(point to point), per device and time step.

Usage: bench/zero_comm.py [--build build] [--models transformer,resnet]
                          [--devices 4] [--steps 3]
Exports each e2e model, compiles `dp --zero 3` and `cdp --zero 3
--cdp-rule v1` (Adam, as many stages as devices) with --report
(predicted), runs each for S steps with --report (measured), and prints
from the measured report: the bytes sent per training step (all devices;
dp: all-gathers before every forward and backward and the reduce-scatter
of the gradients; cdp: one point-to-point hop per use of a stage, the
gradient chain and the mean to the owner), the share of it sent by
collectives, the most bytes one device sends in one time step, the most
all devices send in one time step, how many time steps carry any traffic,
and how many devices must meet at once (a collective's N, a message's 2).
`measured = predicted` compares the whole per-time-step series.
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

PLANS = [("dp --zero 3", ["--strategy", "dp", "--zero", "3"]),
         ("cdp --zero 3", ["--strategy", "cdp", "--cdp-rule", "v1", "--zero", "3"])]


def series(report):
    """Per time step, per device: (sent, sent by collectives)."""
    return [[(d["sent_bytes"], d["sent_collective_bytes"]) for d in t["devices"]]
            for t in report["time_steps"]]


def row(model, name, devices, steps, measured, predicted):
    sent = series(measured)
    total = sum(s for t in sent for s, _ in t)
    collective = sum(c for t in sent for _, c in t)
    per_device = max(s for t in sent for s, _ in t)
    per_step = max(sum(s for s, _ in t) for t in sent)
    busy = sum(1 for t in sent if any(s for s, _ in t))
    meet = devices if collective else 2
    same = "measured = predicted" if sent == series(predicted) else "MEASURED DIFFERS"
    print("%-12s %-13s %12d %11.0f%% %14d %14d %6d/%-4d %5d   %s" %
          (model, name, total // steps, 100.0 * collective / max(total, 1), per_device, per_step,
           busy, len(sent), meet, same))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--models", default="transformer,resnet")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    binary = lambda name: os.path.join(args.build, "bin", name)  # noqa: E731
    n, steps = args.devices, args.steps
    print("N = %d devices, %d stages, Adam, %d steps; bytes" % (n, n, steps))
    print("%-12s %-13s %12s %12s %14s %14s %11s %5s" %
          ("model", "plan", "sent/step", "collective", "peak dev x ts", "peak ts (all)",
           "busy ts", "meet"))
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory() as work:
            path = models.export(model, work)
            _, example, _ = models.build(model)
            axis = 1 if model == "transformer" else 0
            flags = ["--batch-axis", "input=1"] if model == "transformer" else []
            shape = list(example.shape)
            shape[axis] *= n * steps
            x, y = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
            np.save(x, np.random.default_rng(0).standard_normal(shape).astype(np.float32))
            np.save(y, np.random.default_rng(1).integers(0, 10, shape[axis]))
            for name, strategy in PLANS:
                plan = os.path.join(work, "p.cdp")
                predicted, measured = os.path.join(work, "p.json"), os.path.join(work, "m.json")
                subprocess.run([binary("cdp-compile"), path, *flags, *strategy, "--devices",
                                str(n), "--stages", str(n), "--optimizer", "adam", "--report",
                                predicted, "--steps", str(steps), "-o", plan],
                               check=True, stdout=subprocess.DEVNULL)
                subprocess.run([binary("cdp-run"), plan, "--feed", "input=" + x, "--feed",
                                "labels=" + y, "--steps", str(steps), "--report", measured],
                               check=True, stdout=subprocess.DEVNULL)
                row(model, name, n, steps, cdp_report.load(measured),
                    cdp_report.load(predicted))


if __name__ == "__main__":
    main()
