#!/usr/bin/env python3
"""Every strategy under `mpirun -np R` against the one-process run.

For each end-to-end model (the MLP, LeNet and the ResNet of
test/e2e/export_torch_models.py, trained on Fashion-MNIST) and each
strategy, compiles a plan, runs 3 steps in one process, then under mpirun
with R = the plan's devices and R = half of them, over TCP on loopback and
over shared memory, and compares the trained parameters: bit-identical, and
the largest difference. The first configuration runs twice under mpirun
to show two runs are bit-identical too. Prints a Markdown table
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


def main():
    work = tempfile.mkdtemp(prefix="cdp-mpi-matrix-")
    subprocess.run([sys.executable, "-W", "ignore",
                    os.path.join(ROOT, "test", "e2e", "export_torch_models.py"), work,
                    "mlp", "lenet", "resnet"], check=True, capture_output=True)
    rows, checked = [], False
    print("| model | strategy | devices | processes | transport | bit-identical | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for model in ["mlp", "lenet", "resnet"]:
        onnx = os.path.join(work, model + ".onnx")
        extra = ["--batch-size", "8"] if model == "mlp" else []
        for label, flags in STRATEGIES:
            plan = os.path.join(work, f"{model}-{label.replace(' ', '-')}.cdp")
            out = run([COMPILE, onnx, *extra, *flags.split(), "-o", plan])
            if out.returncode:
                print(f"| {model} | {label} | - | - | - | compile failed: {out.stderr.strip()} | - |")
                continue
            local = plan + ".local"
            out = run([RUN, plan, "--data", "fashion-mnist", "--steps", "3",
                       "--dump-params", local])
            devices = int(re.search(r"on (\d+) devices", out.stdout).group(1))
            for processes in sorted({devices, max(devices // 2, 1)}, reverse=True):
                for transport, mca in TRANSPORTS:
                    folder = f"{plan}.np{processes}.{transport[0]}"
                    out = run(["mpirun", "--oversubscribe", *mca, "-np", str(processes), RUN,
                               plan, "--data", "fashion-mnist", "--steps", "3",
                               "--dump-params", folder], timeout=300)
                    same, worst = compare(local, folder) if out.returncode == 0 else (False, float("inf"))
                    note = "" if out.returncode == 0 else f" (exit {out.returncode})"
                    print(f"| {model} | {label} | {devices} | {processes} | {transport} | "
                          f"{'yes' if same else 'NO' + note} | {worst:.1e} |", flush=True)
                    if not checked:
                        again = folder + ".again"
                        run(["mpirun", "--oversubscribe", *mca, "-np", str(processes), RUN,
                             plan, "--data", "fashion-mnist", "--steps", "3",
                             "--dump-params", again], timeout=300)
                        rerun_same, _ = compare(folder, again)
                        checked = True
                        rows.append(f"two mpirun runs of {model} {label}, {processes} processes "
                                    f"over {transport}: bit-identical {'yes' if rerun_same else 'NO'}")
    for row in rows:
        print()
        print(row)


if __name__ == "__main__":
    main()
