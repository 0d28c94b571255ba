#!/usr/bin/env python3
"""Every strategy under `mpirun -np R` against the one-process run.

For each end-to-end model (the MLP, LeNet and the ResNet of
test/e2e/export_torch_models.py, trained on Fashion-MNIST; the transformer
block on fixed random tokens and labels) and each strategy, compiles a plan,
runs 3 steps in one process, then under mpirun with R = the plan's devices
and R = half of them, over TCP on loopback and over shared memory, and
compares the trained parameters: bit-identical, and the largest difference.
The first configuration runs twice under mpirun to show two runs are
bit-identical too. Then, for each model and strategy, under mpirun with R =
half the devices: 3 steps with --checkpoint, --resume to step 6, against 6
uninterrupted steps in one process. Prints Markdown tables
(docs/results.md keeps the latest).

Usage: bench/mpi_matrix.py [BUILD_DIR]   (default build/)
"""

import glob
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
COMPILE = os.path.join(BUILD, "bin", "cdp-compile")
RUN = os.path.join(BUILD, "bin", "cdp-run")

STRATEGIES = [
    ("dp", "--strategy dp --devices 4 --stages 2"),
    ("cdp v2", "--strategy cdp --devices 4 --stages 2"),
    ("cdp chain", "--strategy cdp --devices 2 --stages 2 --cdp-rule v1 --cdp-reduce chain"),
    ("gpipe", "--strategy gpipe --stages 2 --micro-batches 2"),
    ("gpipe x2", "--strategy gpipe --stages 2 --micro-batches 2 --replicas 2 --devices 4"),
    ("1f1b", "--strategy 1f1b --stages 2 --micro-batches 4"),
    ("2bw", "--strategy 2bw --stages 2 --micro-batches 2"),
    ("cdp-mp", "--strategy cdp-mp --stages 2 --micro-batches 4"),
]
TRANSPORTS = [("tcp", ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]),
              ("shared memory", ["--mca", "btl", "self,vader",
                                 "--mca", "btl_vader_single_copy_mechanism", "none"])]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def params(folder):
    return {os.path.basename(f): np.load(f) for f in sorted(glob.glob(folder + "/*.npy"))}


def compare(a, b):
    pa, pb = params(a), params(b)
    if pa.keys() != pb.keys() or not pa:
        return False, float("inf")
    worst = max(float(np.max(np.abs(pa[k].astype(np.float64) - pb[k]))) for k in pa)
    same = all(pa[k].tobytes() == pb[k].tobytes() for k in pa)
    return same, worst


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, **kw)


def model_flags(model, work):
    """(cdp-compile flags, cdp-run data flags) of a model."""
    if model == "mlp":
        return ["--batch-size", "8"], ["--data", "fashion-mnist"]
    if model != "transformer":
        return [], ["--data", "fashion-mnist"]
    # (sequence, batch, features) with the batch on axis 1; labels per sample.
    rng = np.random.default_rng(0)
    x, y = os.path.join(work, "tokens.npy"), os.path.join(work, "token-labels.npy")
    np.save(x, rng.standard_normal((6, 64, 32)).astype(np.float32))
    np.save(y, rng.integers(0, 10, 64).astype(np.int64))
    return (["--batch-axis", "input=1"],
            ["--feed", "input=" + x, "--feed", "labels=" + y])


def resume_check(plan, processes, data, local6):
    """3 steps under mpirun with a checkpoint, resumed to 6: equal to local6?"""
    mca = TRANSPORTS[0][1]
    ck, resumed = plan + ".ck", plan + ".resumed"
    first = run(["mpirun", "--oversubscribe", *mca, "-np", str(processes), RUN, plan, *data,
                 "--steps", "3", "--checkpoint", ck], timeout=300)
    second = run(["mpirun", "--oversubscribe", *mca, "-np", str(processes), RUN, plan, *data,
                  "--steps", "6", "--resume", ck, "--dump-params", resumed], timeout=300)
    if first.returncode or second.returncode:
        return "NO (exit %d, %d)" % (first.returncode, second.returncode)
    same, worst = compare(local6, resumed)
    return "yes" if same else "NO (%.1e)" % worst


def main():
    work = tempfile.mkdtemp(prefix="cdp-mpi-matrix-")
    subprocess.run([sys.executable, "-W", "ignore",
                    os.path.join(ROOT, "test", "e2e", "export_torch_models.py"), work,
                    "mlp", "lenet", "resnet", "transformer"], check=True, capture_output=True)
    rows, checked, resumes = [], False, []
    print("| model | strategy | devices | processes | transport | bit-identical | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for model in ["mlp", "lenet", "resnet", "transformer"]:
        onnx = os.path.join(work, model + ".onnx")
        extra, data = model_flags(model, work)
        for label, flags in STRATEGIES:
            plan = os.path.join(work, f"{model}-{label.replace(' ', '-')}.cdp")
            out = run([COMPILE, onnx, *extra, *flags.split(), "-o", plan])
            if out.returncode:
                print(f"| {model} | {label} | - | - | - | compile failed: {out.stderr.strip()} | - |")
                continue
            local = plan + ".local"
            out = run([RUN, plan, *data, "--steps", "3",
                       "--dump-params", local])
            devices = int(re.search(r"on (\d+) devices", out.stdout).group(1))
            local6 = plan + ".local6"
            run([RUN, plan, *data, "--steps", "6", "--dump-params", local6])
            half = max(devices // 2, 1)
            resumes.append(f"| {model} | {label} | {devices} | {half} | "
                           f"{resume_check(plan, half, data, local6)} |")
            for processes in sorted({devices, max(devices // 2, 1)}, reverse=True):
                for transport, mca in TRANSPORTS:
                    folder = f"{plan}.np{processes}.{transport[0]}"
                    out = run(["mpirun", "--oversubscribe", *mca, "-np", str(processes), RUN,
                               plan, *data, "--steps", "3",
                               "--dump-params", folder], timeout=300)
                    same, worst = compare(local, folder) if out.returncode == 0 else (False, float("inf"))
                    note = "" if out.returncode == 0 else f" (exit {out.returncode})"
                    print(f"| {model} | {label} | {devices} | {processes} | {transport} | "
                          f"{'yes' if same else 'NO' + note} | {worst:.1e} |", flush=True)
                    if not checked:
                        again = folder + ".again"
                        run(["mpirun", "--oversubscribe", *mca, "-np", str(processes), RUN,
                             plan, *data, "--steps", "3",
                             "--dump-params", again], timeout=300)
                        rerun_same, _ = compare(folder, again)
                        checked = True
                        rows.append(f"two mpirun runs of {model} {label}, {processes} processes "
                                    f"over {transport}: bit-identical {'yes' if rerun_same else 'NO'}")
    for row in rows:
        print()
        print(row)
    print()
    print("| model | strategy | devices | processes | resumed = uninterrupted |")
    print("|---|---|---|---|---|")
    for row in resumes:
        print(row)


if __name__ == "__main__":
    main()
