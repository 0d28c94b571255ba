#!/usr/bin/python3
"""dp with sharded model states (--zero K) against dp without, on an e2e
model: 4 devices, 4 stages, 3 steps from the same weights and data; every
parameter and buffer must agree within 1e-6 (check_same.py). Prints one line
per stage K and optimizer.

Usage: zero_compare.py BIN_DIR WORK_DIR MODEL OPTIMIZER [--cdp] K... [-- MPIRUN...]
With an mpirun command after `--`, the sharded plans run as 4 processes
under it (the unsharded one in one process). With --cdp both run
--strategy cdp --cdp-rule v1 (CDP-ZeRO against CDP: K is 3).
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torch_models as models  # noqa: E402

args = sys.argv[1:]
mpirun = args[args.index("--") + 1:] if "--" in args else []
args = args[:args.index("--")] if "--" in args else args
bin_dir, work, name, optimizer = args[:4]
stages = [k for k in args[4:] if k != "--cdp"]
strategy = ["--strategy", "cdp", "--cdp-rule", "v1"] if "--cdp" in args else ["--strategy", "dp"]
os.makedirs(work, exist_ok=True)
devices, steps = 4, 3
path = models.export(name, work)
_, example, _ = models.build(name)
axis = 1 if name == "transformer" else 0
batch = example.shape[axis]
rng = np.random.default_rng(0)
shape = list(example.shape)
shape[axis] *= devices * steps
np.save(os.path.join(work, "x.npy"), rng.standard_normal(shape).astype(np.float32))
np.save(os.path.join(work, "y.npy"), rng.integers(0, 10, shape[axis]).astype(np.int64))
flags = {"transformer": ["--batch-axis", "input=1"], "mlp": ["--batch-size", str(batch)]}


def train(zero, launcher):
    plan = os.path.join(work, "zero%s.cdp" % zero)
    out = os.path.join(work, "zero%s" % zero)
    subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan, *strategy,
                    "--devices", str(devices), "--stages", "4", "--optimizer", optimizer,
                    "--zero", zero, *flags.get(name, [])], check=True)
    subprocess.run(launcher + [os.path.join(bin_dir, "cdp-run"), plan, "--feed",
                               "input=" + os.path.join(work, "x.npy"), "--feed",
                               "labels=" + os.path.join(work, "y.npy"), "--steps", str(steps),
                               "--dump-params", out], check=True, stdout=subprocess.DEVNULL)
    return out


reference = train("0", [])
for zero in stages:
    sharded = train(zero, mpirun + ["-np", str(devices)] if mpirun else [])
    result = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "check_same.py"),
                             reference, sharded], check=True, capture_output=True, text=True)
    verdict = ("same as " + strategy[1]) if "same as" in result.stdout else result.stdout.strip()
    print("%s %s --zero %s%s: %s" % (name, optimizer, zero, " (mpirun)" if mpirun else "",
                                     verdict))
