#!/usr/bin/python3
"""The fused plan against the unfused one (cdp-compile --no-fusion) on an
e2e model: 3 SGD steps from the same weights and data; every parameter must
agree within 1e-5 (absolute, + 1e-4 relative). Prints how many ops the
fusion passes made (layer_norm, of them with rms, gelu, attention, rotary), the transposes left of the unfused
plan's, the unfused plan's ReLUs a product or batch norm applies (cdp-fuse-relu), and the
largest difference.

Usage: fusion_compare.py BIN_DIR WORK_DIR MODEL [PRECISION]

PRECISION (fp32 by default) compiles both plans so: bf16 checks that a
fusion keeps autocast's rounding points.
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torch_models as models  # noqa: E402

bin_dir, work, name = sys.argv[1:4]
precision = sys.argv[4] if len(sys.argv) > 4 else "fp32"
os.makedirs(work, exist_ok=True)
path = models.export(name, work)
_, example, _ = models.build(name)
axis = 1 if name == "transformer" else 0
batch = example.shape[axis]
rng = np.random.default_rng(0)
shape = list(example.shape)
shape[axis] *= 3
np.save(os.path.join(work, "x.npy"), rng.standard_normal(shape).astype(np.float32))
np.save(os.path.join(work, "y.npy"), rng.integers(0, 10, 3 * batch).astype(np.int64))
flags = {"transformer": ["--batch-axis", "input=1"], "mlp": ["--batch-size", str(batch)]}
flags[name] = flags.get(name, []) + ["--precision", precision]
params, ops = {}, {}
for variant, extra in (("fused", []), ("unfused", ["--no-fusion"])):
    plan = os.path.join(work, variant + ".cdp")
    subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan, "--optimizer",
                    "momentum", "--lr", "0.05", *flags.get(name, []), *extra], check=True)
    text = subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "--emit=train-mlir",
                           *flags.get(name, []), *extra], check=True, capture_output=True,
                          text=True).stdout
    ops[variant] = {op: text.count("cdp.%s " % op) for op in ("layer_norm", "gelu", "attention",
                                                               "rotary", "transpose", "relu")}
    ops[variant]["relu_fused"] = text.count('activation = "relu"')
    ops[variant]["rotary"] = sum("cdp.rotary " in line and "adjoint" not in line
                                 for line in text.splitlines())
    ops[variant]["rms"] = sum("cdp.layer_norm " in line and "rms = true" in line
                              for line in text.splitlines())
    out = os.path.join(work, variant)
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--feed",
                    "input=" + os.path.join(work, "x.npy"), "--feed",
                    "labels=" + os.path.join(work, "y.npy"), "--steps", "3", "--dump-params", out],
                   check=True, stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(out, "index.json")))
    params[variant] = {k: np.load(os.path.join(out, f)) for k, f in index.items()}
worst = max(float(np.abs(params["fused"][k] - params["unfused"][k]).max()) for k in params["fused"])
same = all(np.allclose(params["fused"][k], params["unfused"][k], atol=1e-5, rtol=1e-4)
           for k in params["fused"])
print("%s: %d layer_norm (%d rms), %d gelu, %d attention, %d rotary fused, transposes %d of %d, "
      "relus %d of %d fused, %s (largest difference %.1e)" %
      (name, ops["fused"]["layer_norm"], ops["fused"]["rms"], ops["fused"]["gelu"],
       ops["fused"]["attention"], ops["fused"]["rotary"],
       ops["fused"]["transpose"], ops["unfused"]["transpose"], ops["fused"]["relu_fused"],
       ops["unfused"]["relu"], "within 1e-5" if same else "DIFFERENT", worst))
