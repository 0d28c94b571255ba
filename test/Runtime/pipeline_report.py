#!/usr/bin/python3
"""Compiles a pipeline plan of the 4-layer MLP (cut after every Tanh) with
--report, runs it with --report, checks that prediction and measurement
agree key by key (workspace aside), and prints per device the peak stashed
activation units (and per stage the peak of their sum), the peak activation bytes and the weight bytes of the
extra versions.

Usage: pipeline_report.py BIN_DIR WORK_DIR MODEL.onnx STRATEGY M [REPLICAS]
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import cdp_report  # noqa: E402

bin_dir, work, model, strategy, m = sys.argv[1:6]
m, steps = int(m), 3
replicas = int(sys.argv[6]) if len(sys.argv) > 6 else 1
os.makedirs(work, exist_ok=True)
plan, predicted, measured = (os.path.join(work, f) for f in
                             ("plan.cdp", "predicted.json", "measured.json"))
# cdp-mp: M is N, the micro-batches (CDP slots) sharing the devices.
count = ["--micro-batches", str(m)]
if replicas > 1:
    count += ["--replicas", str(replicas), "--devices", str(4 * replicas)]
subprocess.run([os.path.join(bin_dir, "cdp-compile"), model, "-o", plan, "--strategy", strategy]
               + count + ["--stage-boundaries", "tanh0,tanh1,tanh2",
                          "--optimizer", "momentum", "--report", predicted, "--steps", str(steps)],
               check=True)
rng = np.random.default_rng(0)
np.save(os.path.join(work, "x.npy"), rng.standard_normal((2 * m * steps * replicas, 16)).astype(np.float32))
np.save(os.path.join(work, "y.npy"), rng.integers(0, 16, 2 * m * steps * replicas).astype(np.int64))
subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--feed", "x=" + os.path.join(work, "x.npy"),
                "--feed", "labels=" + os.path.join(work, "y.npy"), "--steps", str(steps),
                "--report", measured], check=True, stdout=subprocess.DEVNULL)


def series(path):
    report = cdp_report.load(path)
    return report, [[{k: v for k, v in d.items() if k != "workspace_bytes"} for d in t["devices"]]
                    for t in report["time_steps"]]


report, got = series(measured)
_, want = series(predicted)
print("%s M=%d predicted equals measured: %s" % (strategy, m, got == want))
devices = report["devices"]
peak = lambda key: [max(t[d][key] for t in got) for d in range(devices)]
print("stash units", peak("activation_units"))
print("activation bytes", peak("activation_bytes"))
print("extra version bytes", peak("weight_version_bytes"), "stage params", report["stage_param_bytes"])
print("devices", devices)
# Per stage: its devices, and the most units alive on them at once (the
# per-stage resident units of algorithms.md 2.5's table).
stages = report["device_stages"]
per_stage = [[d for d in range(devices) if stages[d] == s] for s in range(1, report["stages"] + 1)]
print("devices per stage", [len(ds) for ds in per_stage])
print("stage units", [max(sum(t[d]["activation_units"] for d in ds) for t in got)
                      for ds in per_stage])
print("step", report["step_time_steps"], "time steps, bubble",
      "[" + ", ".join("%g" % b for b in report["bubble_fraction"]) + "]")
print("sent bytes per step", sum(d["sent_bytes"] for t in got[:len(got) // steps] for d in t))
print("arena bytes", report["arena_bytes"])
print("sent bytes in the run", sum(d["sent_bytes"] for t in got for d in t))
# Devices alike in every number share a row, in both reports alike.
written = [json.load(open(path)) for path in (predicted, measured)]
print("rows", len(written[0]["time_steps"][0]["devices"]), "series_of",
      written[0].get("series_of"), "measured the same",
      written[0].get("series_of") == written[1].get("series_of"))
