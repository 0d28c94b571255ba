#!/usr/bin/python3
"""Model-state bytes per device under dp and --zero 1, 2, 3 against ZeRO's
formulas (fp32, Adam).

Usage: bench/zero_memory.py [--build build] [--model transformer|resnet|...]
                             [--mpirun-steps S]
Exports an e2e model, compiles dp plans (Adam, 4 stages) with --report for
N = 4, 64 and 1024 devices, runs the N = 4 plans for 3 steps with --report
(measured), and prints per device the resident weight, mean-gradient and
optimizer bytes of the report beside Psi = the model's parameter bytes / 4
and the formulas: weights 4 Psi (stage 3: 4 Psi / N), gradients 4 Psi
(stages 2 and 3: 4 Psi / N), optimizer 8 Psi (stages 1 to 3: 8 Psi / N),
and with stage 3 the most bytes of gathered parameters at one time step.
The difference is the padding of each stage to N equal shards. For N = 4
it then prints device 0's measured bytes per category (weights, gathered
parameters, mean gradients, optimizer state, kernel workspace, arena,
peak, bytes sent). Then, under
`mpirun -np 4` (one thread per rank), the mean step time of S steps and
the measured peak bytes of device 0 and of the fullest device for dp,
dp --zero 1|2|3, cdp (rule v2, the default), cdp v1 and cdp --zero 3
(CDP-ZeRO, rule v1).
"""
import argparse
import json
import math
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


def first_devices(report):
    """Weights, mean-gradient and optimizer bytes of device 0 at the first
    time step (resident for the whole run), and its most gathered
    parameter bytes at one time step (stage 3)."""
    d = report["time_steps"][0]["devices"][0]
    gathered = max(t["devices"][0]["gathered_weight_bytes"] for t in report["time_steps"])
    return d["weight_bytes"], d["gradient_bytes"], d["optimizer_bytes"], gathered


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", default="transformer")
    parser.add_argument("--mpirun-steps", type=int, default=200)
    args = parser.parse_args()
    binary = lambda name: os.path.join(args.build, "bin", name)  # noqa: E731
    with tempfile.TemporaryDirectory() as work:
        path = models.export(args.model, work)
        _, example, _ = models.build(args.model)
        axis = 1 if args.model == "transformer" else 0
        flags = ["--batch-axis", "input=1"] if args.model == "transformer" else []
        print("%-12s %6s %5s %10s %10s %10s %10s %10s %10s" %
              ("model", "N", "zero", "weights", "gradients", "optimizer", "total",
               "formula", "gathered"))
        categories = []
        for n in [4, 64, 1024]:
            for zero in [0, 1, 2, 3]:
                report = os.path.join(work, "r.json")
                plan = os.path.join(work, "p.cdp")
                subprocess.run([binary("cdp-compile"), path, *flags, "--strategy", "dp",
                                "--devices", str(n), "--stages", "4", "--optimizer", "adam",
                                "--zero", str(zero), "--report", report, "-o", plan,
                                "--steps", "3"], check=True, stdout=subprocess.DEVNULL)
                predicted = cdp_report.load(report)
                psi = sum(predicted["stage_param_bytes"]) // 4
                weights = 4 * psi / n if zero == 3 else 4 * psi
                grads = 4 * psi / n if zero >= 2 else 4 * psi
                opt = 8 * psi / n if zero else 8 * psi
                row = first_devices(predicted)
                kind = "predicted"
                if n == 4:
                    shape = list(example.shape)
                    shape[axis] *= n * 3
                    np.save(os.path.join(work, "x.npy"),
                            np.random.default_rng(0).standard_normal(shape).astype(np.float32))
                    np.save(os.path.join(work, "y.npy"),
                            np.random.default_rng(1).integers(0, 10, shape[axis]))
                    measured = os.path.join(work, "m.json")
                    subprocess.run([binary("cdp-run"), plan, "--feed",
                                    "input=" + os.path.join(work, "x.npy"), "--feed",
                                    "labels=" + os.path.join(work, "y.npy"), "--steps", "3",
                                    "--report", measured], check=True, stdout=subprocess.DEVNULL)
                    measured_report = cdp_report.load(measured)
                    categories.append((zero, measured_report))
                    measured_row = first_devices(measured_report)
                    kind = "measured = predicted" if measured_row == row else "MEASURED DIFFERS"
                print("%-12s %6d %5d %10d %10d %10d %10d %10d %10d   %s (Psi = %d)" %
                      (args.model, n, zero, row[0], row[1], row[2], sum(row[:3]),
                       math.ceil(weights + grads + opt), row[3], kind, psi))
        print_categories(args.model, categories)
        deepspeed_beside(args, binary, path, flags, work)
        if args.mpirun_steps > 0:
            mpirun_times(args, binary, path, flags, work, example.shape[axis])


def print_categories(model, categories):
    """Device 0 of the measured N = 4 runs: its resident weights, mean
    gradients and optimizer state (the first time step), the most
    parameter bytes gathered at one time step, the kernels' workspace, its
    arena, its peak and the bytes it sent in the run."""
    print("\nN = 4, measured, device 0 (bytes)")
    print("%-12s %5s %9s %9s %9s %9s %10s %9s %10s %9s" %
          ("model", "zero", "weights", "gathered", "means", "optimizer", "workspace", "arena",
           "peak", "sent"))
    for zero, report in categories:
        rows = [t["devices"][0] for t in report["time_steps"]]
        first = rows[0]
        print("%-12s %5d %9d %9d %9d %9d %10d %9d %10d %9d" % (
            model, zero, first["weight_bytes"], max(r["gathered_weight_bytes"] for r in rows),
            first["gradient_bytes"], first["optimizer_bytes"], first["workspace_bytes"],
            report["arena_bytes"][0], report["peak"]["device_bytes"][0],
            sum(r["sent_bytes"] for r in rows)))


def largest_layer(model):
    """DeepSpeed's largest layer: the most parameters one module holds
    directly (deepspeed.runtime.zero.stage3.model_to_params)."""
    return max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())


def deepspeed_beside(args, binary, path, flags, work):
    """ZeRO-3 per device beside DeepSpeed's published estimate
    (estimate_zero3_model_states_mem_needs, no offload: 4 x largest layer +
    18 bytes a parameter over N, for fp16 mixed precision with Adam) and its
    fp32 counterpart (16 bytes a parameter: fp32 weights, gradients and
    Adam's two moments). Ours: the resident shards plus the most bytes
    gathered at one time step (a stage, where DeepSpeed gathers a module)."""
    model, _, _ = models.build(args.model)
    layer = largest_layer(model)
    print("\nZeRO stage 3 per device (bytes) beside DeepSpeed's estimate (largest layer %d "
          "parameters)" % layer)
    print("%-12s %6s %12s %12s %16s %16s" % ("model", "N", "cdp resident", "cdp gathered",
                                             "DeepSpeed fp16", "fp32 counterpart"))
    for n in [4, 64, 1024]:
        report = os.path.join(work, "ds.json")
        subprocess.run([binary("cdp-compile"), path, *flags, "--strategy", "dp", "--devices",
                        str(n), "--stages", "4", "--optimizer", "adam", "--zero", "3",
                        "--report", report, "-o", os.path.join(work, "ds.cdp"), "--steps", "3"],
                       check=True, stdout=subprocess.DEVNULL)
        predicted = cdp_report.load(report)
        psi = sum(predicted["stage_param_bytes"]) // 4
        row = first_devices(predicted)
        print("%-12s %6d %12d %12d %16d %16d" % (args.model, n, sum(row[:3]), row[3],
                                                 4 * layer + int(18 * psi / n),
                                                 4 * layer + int(16 * psi / n)))


MPIRUN = ["mpirun", "--oversubscribe", "--mca", "btl", "self,vader", "--mca",
          "btl_vader_single_copy_mechanism", "none", "-np", "4"]


def mpirun_times(args, binary, path, flags, work, batch):
    """Step time and peak bytes of 4 ranks for dp, dp --zero 1|2|3, cdp,
    cdp v1 and cdp --zero 3.
    The inputs are x.npy and y.npy of the N = 4 runs above."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print("\nmpirun -np 4, one thread per rank, Adam, %d steps" % args.mpirun_steps)
    print("%-12s %-14s %12s %16s %16s" % ("model", "plan", "ms/step", "peak bytes (0)",
                                          "peak bytes (max)"))
    for name, extra in [("dp", []), ("dp --zero 1", ["--zero", "1"]),
                        ("dp --zero 2", ["--zero", "2"]), ("dp --zero 3", ["--zero", "3"]),
                        ("cdp", []), ("cdp v1", ["--cdp-rule", "v1"]),
                        ("cdp --zero 3", ["--cdp-rule", "v1", "--zero", "3"])]:
        strategy = name.split()[0]
        plan = os.path.join(work, "t.cdp")
        subprocess.run([binary("cdp-compile"), path, *flags, "--strategy", strategy,
                        "--devices", "4", "--stages", "4", "--optimizer", "adam", *extra,
                        "-o", plan], check=True, stdout=subprocess.DEVNULL)
        metrics, report = os.path.join(work, "m.jsonl"), os.path.join(work, "t.json")
        subprocess.run(MPIRUN + [binary("cdp-run"), plan, "--feed",
                                 "input=" + os.path.join(work, "x.npy"), "--feed",
                                 "labels=" + os.path.join(work, "y.npy"), "--steps",
                                 str(args.mpirun_steps), "--threads", "1", "--metrics", metrics,
                                 "--report", report], check=True, env=env,
                       capture_output=True)
        rates = [json.loads(line)["samples_per_s"] for line in open(metrics)][3:]
        ms = float(np.mean([1e3 * 4 * batch / rate for rate in rates]))
        peaks = json.load(open(report))["peak"]["device_bytes"]
        print("%-12s %-14s %12.3f %16d %16d" % (args.model, name, ms, peaks[0], max(peaks)))


if __name__ == "__main__":
    main()
