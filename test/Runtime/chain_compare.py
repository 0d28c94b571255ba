#!/usr/bin/python3
"""--cdp-reduce chain against the all-reduce on N slots (cdp v1, the 4-layer
MLP cut after every Tanh, 3 steps): the parameters must be bit-identical
(both sum in slot order), and the chain's predicted report must equal the
measured one (workspace aside).

Usage: chain_compare.py BIN_DIR WORK_DIR MODEL.onnx N [CDP-COMPILE FLAG...]
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import cdp_report  # noqa: E402

bin_dir, work, model, n = sys.argv[1:5]
extra = sys.argv[5:]
n, steps = int(n), 3
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(0)
x, y = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
np.save(x, rng.standard_normal((2 * n * steps, 16)).astype(np.float32))
np.save(y, rng.integers(0, 16, 2 * n * steps).astype(np.int64))
params = {}
for reduce in ("chain", "allreduce"):
    plan = os.path.join(work, reduce + ".cdp")
    subprocess.run([os.path.join(bin_dir, "cdp-compile"), model, "-o", plan, "--strategy", "cdp",
                    "--devices", str(n), "--stage-boundaries", "tanh0,tanh1,tanh2",
                    "--cdp-rule", "v1", "--cdp-reduce", reduce,
                    "--report", os.path.join(work, reduce + "-predicted.json"), *extra],
                   check=True)
    out = os.path.join(work, reduce)
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--feed", "x=" + x, "--feed",
                    "labels=" + y, "--steps", str(steps), "--dump-params", out, "--report",
                    os.path.join(work, reduce + "-measured.json")],
                   check=True, stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(out, "index.json")))
    params[reduce] = {k: np.load(os.path.join(out, f)) for k, f in index.items()}
same = all(np.array_equal(params["chain"][k], params["allreduce"][k]) for k in params["chain"])
print("chain equals allreduce bit for bit:", same)


def series(path):
    return [[{k: v for k, v in d.items() if k != "workspace_bytes"} for d in t["devices"]]
            for t in cdp_report.load(path)["time_steps"]]


print("predicted == measured:",
      series(os.path.join(work, "chain-predicted.json")) == series(os.path.join(work, "chain-measured.json")))
