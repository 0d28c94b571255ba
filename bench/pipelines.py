#!/usr/bin/python3
"""Pipeline strategies on 4 in-process devices: gpipe, 1f1b, 2bw, cdp-mp.

Usage: bench/pipelines.py [--build build] [--steps T] [--models resnet,transformer]

For each model (the ResNet with BatchNorm and the transformer encoder block
of test/e2e/export_torch_models.py) and strategy, with 4 stages and 4
micro-batches per step: compiles with --report, runs T steps on random data
with --trace and --report, and prints

- samples/s (cdp-run's metrics: the steps after the first),
- the measured peak bytes per device (the report's accounting of live
  tensors) and each device's arena (what it allocates for activations),
- each device's busy fraction (compute and update spans of the trace over
  the run's wall time),
- the step time predicted from measured per-op times against the measured
  one, two ways: "profile" is cdp-compile --report's predicted_step_ms from
  a cdp-run --profile of the model on one device with one thread (which
  also balances the stages: --profile); "replay" replays every device's
  trace in its own order with each span's duration replaced by the mean of
  its kind on that device (F_s, B_s, update, send; receives take no time),
  a receive starting no earlier than the end of its send (the trace's flow
  events). The measurement is the trace's makespan per step.

Then the same strategies compiled with --hw instead of a profile (the
hardware model of bench/measure_hw.py, or --hw FILE): stages cut on the
analytic cost model, the step time predicted from FLOP/s, memory bandwidth
and the link, printed against the measured one.

The devices are threads of one process; with fewer cores than devices
they contend for the cores, which the prediction does not model.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "e2e"))
import export_torch_models as models  # noqa: E402

STRATEGIES = ["gpipe", "1f1b", "2bw", "cdp-mp"]


def replay(events):
    """Predicted makespan: each device's spans in order, mean durations."""
    spans = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            spans[e["tid"]].append(e)
    sends = {e["id"]: e for e in events if e["ph"] == "s"}
    recv_of = {}
    for e in events:
        if e["ph"] == "f":
            recv_of.setdefault(e["tid"], []).append(e)
    kind = lambda e: e["name"]
    mean = {}
    for tid, list_ in spans.items():
        by_kind = defaultdict(list)
        for e in list_:
            by_kind[kind(e)].append(e["dur"])
        for k, durations in by_kind.items():
            mean[(tid, k)] = 0.0 if k.startswith("recv") else float(np.mean(durations))
    # A receive span waits for the sends whose flow ends inside it.
    waits = defaultdict(list)
    for tid, ends in recv_of.items():
        for f in ends:
            for span in spans[tid]:
                if span["ts"] <= f["ts"] <= span["ts"] + span["dur"] + 1e-3:
                    waits[id(span)].append(f["id"])
                    break
    send_span = {}
    for tid, list_ in spans.items():
        for span in list_:
            for s in sends.values():
                if s["tid"] == tid and span["ts"] <= s["ts"] <= span["ts"] + span["dur"] + 1e-3:
                    send_span[s["id"]] = span
    end = {}
    position = {tid: 0 for tid in spans}
    clock = {tid: 0.0 for tid in spans}
    progressed = True
    while progressed:
        progressed = False
        for tid, list_ in spans.items():
            while position[tid] < len(list_):
                span = list_[position[tid]]
                ready = clock[tid]
                blocked = False
                for flow in waits[id(span)]:
                    sender = send_span.get(flow)
                    if sender is None:
                        continue
                    if id(sender) not in end:
                        blocked = True
                        break
                    ready = max(ready, end[id(sender)])
                if blocked:
                    break
                end[id(span)] = ready + mean[(tid, kind(span))]
                clock[tid] = end[id(span)]
                position[tid] += 1
                progressed = True
    return max(clock.values())


def run(name, strategy, build, steps, work, hw=None):
    path = models.export(name, work)
    _, example, _ = models.build(name)
    batch = example.shape[1] if name == "transformer" else example.shape[0]
    m = 4
    np.save(os.path.join(work, "x.npy"),
            np.random.randn(*([example.shape[0], batch * m * steps, example.shape[2]]
                              if name == "transformer" else [batch * m * steps, *example.shape[1:]]))
            .astype(np.float32))
    np.save(os.path.join(work, "y.npy"), np.random.randint(0, 10, batch * m * steps).astype(np.int64))
    profile = os.path.join(work, name + ".profile.json")
    if not os.path.exists(profile):
        single = os.path.join(work, name + "-single.cdp")
        flags = ["--batch-axis", "input=1"] if name == "transformer" else []
        subprocess.run([os.path.join(build, "bin", "cdp-compile"), path, "-o", single, "--lr", "0.01"]
                       + flags, check=True)
        subprocess.run([os.path.join(build, "bin", "cdp-run"), single,
                        "--feed", "input=" + os.path.join(work, "x.npy"),
                        "--feed", "labels=" + os.path.join(work, "y.npy"),
                        "--steps", str(steps), "--threads", "1", "--profile", profile],
                       check=True, stdout=subprocess.DEVNULL)
    plan = os.path.join(work, "%s-%s%s.cdp" % (name, strategy, "-hw" if hw else ""))
    # Stages balanced and step time predicted on the profile, or (hw) on
    # the analytic cost model and the hardware model alone.
    args = [os.path.join(build, "bin", "cdp-compile"), path, "-o", plan, "--strategy", strategy,
            "--stages", "4", "--lr", "0.01", "--report", plan + ".predicted.json",
            "--steps", str(steps)] + (["--hw", hw] if hw else ["--profile", profile])
    args += ["--micro-batches", str(m)]
    if name == "transformer":
        args += ["--batch-axis", "input=1"]
    subprocess.run(args, check=True)
    metrics, trace, report = (plan + suffix for suffix in (".metrics", ".trace.json", ".report.json"))
    subprocess.run([os.path.join(build, "bin", "cdp-run"), plan,
                    "--feed", "input=" + os.path.join(work, "x.npy"),
                    "--feed", "labels=" + os.path.join(work, "y.npy"),
                    "--steps", str(steps), "--metrics", metrics, "--trace", trace,
                    "--report", report], check=True, stdout=subprocess.DEVNULL)
    # Each metrics line's rate is its own step's: the steps after the first
    # (which loads and warms up), as their harmonic mean (samples over time).
    rates = [json.loads(line)["samples_per_s"] for line in open(metrics)][1:]
    rate = len(rates) / sum(1.0 / r for r in rates)
    events = json.load(open(trace))["traceEvents"]
    timed = [e for e in events if e["ph"] == "X"]
    wall = max(e["ts"] + e["dur"] for e in timed) - min(e["ts"] for e in timed)
    busy = []
    for tid in sorted({e["tid"] for e in timed}):
        work_time = sum(e["dur"] for e in timed if e["tid"] == tid and e["cat"] in ("compute", "update"))
        busy.append(work_time / wall)
    replayed = replay(events) / steps
    measured_report = json.load(open(report))
    peak = measured_report["peak"]["device_bytes"]
    arena = measured_report["arena_bytes"]
    profiled = json.load(open(plan + ".predicted.json"))["predicted_step_ms"]
    return rate, (peak, arena), busy, profiled, replayed / 1e3, wall / steps / 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--models", default="resnet,transformer")
    parser.add_argument("--hw", help="hardware model (bench/measure_hw.py -o FILE); "
                        "default: measure this machine")
    args = parser.parse_args()
    print("4 devices (threads), 4 stages, 4 micro-batches per step, %d steps, %d cores"
          % (args.steps, os.cpu_count()))
    print("%-12s %-7s %10s %26s %22s %22s %10s %10s %10s" % (
        "model", "strategy", "samples/s", "peak KiB per device", "arena KiB per device",
        "busy per device",
        "profile ms", "replay ms", "meas ms"))
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            for strategy in STRATEGIES:
                rate, peak, busy, profiled, replayed, measured = run(
                    name, strategy, args.build, args.steps, work)
                peak, arena = peak
                print("%-12s %-7s %10.0f %26s %22s %22s %10.2f %10.2f %10.2f" % (
                    name, strategy, rate, " ".join("%d" % (b // 1024) for b in peak),
                    " ".join("%d" % (b // 1024) for b in arena),
                    " ".join("%.2f" % b for b in busy), profiled, replayed, measured))
        # The hardware model: stages cut on analytic costs, step time from
        # FLOP/s, memory bandwidth and the link, against the measured one.
        hw = args.hw
        if not hw:
            hw = os.path.join(work, "hw.json")
            subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "measure_hw.py"),
                            "--build", args.build, "-o", hw], check=True, stdout=subprocess.DEVNULL)
        print("\n--hw %s, stages cut on the analytic cost model:" % json.dumps(json.load(open(hw))))
        print("%-12s %-7s %10s %10s %10s %8s" % ("model", "strategy", "samples/s", "hw ms",
                                                 "meas ms", "meas/hw"))
        for name in args.models.split(","):
            for strategy in STRATEGIES:
                rate, _, _, predicted, _, measured = run(name, strategy, args.build, args.steps,
                                                         work, hw)
                print("%-12s %-7s %10.0f %10.2f %10.2f %8.1f" % (
                    name, strategy, rate, predicted, measured, measured / predicted))


if __name__ == "__main__":
    main()
