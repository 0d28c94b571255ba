#!/usr/bin/python3
"""Compiles a plan with --report, runs it with --report, checks that the
prediction and the measurement agree key by key (workspace and weights read aside), and
prints the series the spec fixes: total activation units per time step and
gradient bytes ready per time step, in units of one stage's bytes.

Usage: report_check.py BIN_DIR WORK_DIR MODEL.onnx INPUT STRATEGY N [cdp flags...]
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import cdp_report  # noqa: E402

bin_dir, work, model, input_name, strategy, n = sys.argv[1:7]
extra = sys.argv[7:]
n = int(n)
os.makedirs(work, exist_ok=True)
steps = 3
plan = os.path.join(work, "plan.cdp")
predicted = os.path.join(work, "predicted.json")
measured = os.path.join(work, "measured.json")
subprocess.run([os.path.join(bin_dir, "cdp-compile"), model, "-o", plan, "--strategy", strategy,
                "--devices", str(n), "--stages", "4", "--report", predicted, "--steps", str(steps)]
               + extra, check=True)
rng = np.random.default_rng(0)
np.save(os.path.join(work, "x.npy"), rng.standard_normal((2 * n * steps, 16)).astype(np.float32))
np.save(os.path.join(work, "y.npy"), rng.integers(0, 16, 2 * n * steps).astype(np.int64))
subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--feed", input_name + "=" + os.path.join(work, "x.npy"),
                "--feed", "labels=" + os.path.join(work, "y.npy"), "--steps", str(steps),
                "--report", measured, "--report-svg", os.path.join(work, "report.svg")],
               check=True, stdout=subprocess.DEVNULL)
p, m = cdp_report.load(predicted), cdp_report.load(measured)


def strip(report):
    for ts in report["time_steps"]:
        for d in ts["devices"]:
            d.pop("workspace_bytes")
    report["peak"].pop("device_bytes")
    report["peak"].pop("resident_bytes")
    report.pop("weights_read_bytes", None)  # measured only
    report.pop("threads_per_device", None)  # measured only
    return report


print("predicted == measured:", strip(p) == strip(m))
stage = p["stage_param_bytes"][0]
print("stage bytes equal:", len(set(p["stage_param_bytes"])) == 1)
print("units:", " ".join(str(sum(d["activation_units"] for d in ts["devices"])) for ts in m["time_steps"]))
print("ready:", " ".join(str(ts["grad_ready_bytes"] // stage) for ts in m["time_steps"]))
print("peak units:", m["peak"]["activation_units"])
print("svg:", os.path.getsize(os.path.join(work, "report.svg")) > 1000)
# Per device, the most stage gradients handed to reductions not yet back:
# one step's (the whole model, at the end of the backward) for dp; under
# cdp a stage whose slot reads a delayed version has two steps' in flight.
print("reductions in flight (stages):", " ".join(
    str(max(ts["devices"][d]["reduction_bytes"] for ts in m["time_steps"]) // stage)
    for d in range(n)))
