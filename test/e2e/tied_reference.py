#!/usr/bin/python3
"""A weight tied across pipeline stages under 2bw and cdp-mp, against
PyTorch: the 4-layer MLP whose last Gemm reuses the first one's weight
(make_models.py mlp4tied), cut after every Tanh so the weight lives on
stages 1 and 4; M = 4 micro-batches per step, SGD with momentum 0.9. The
reference computes step t's gradients at W(max(t - 1, 0)) and applies them
to W(t) (W(t+1) = Opt(W(t), g(W(t-1)))), the tied weight's gradient being
the sum of both uses'. Parameters after 3 steps must match within 1e-5 +
1e-4 relative; the reference must differ from the synchronous one.

Usage: tied_reference.py BIN_DIR WORK_DIR STRATEGY [M]
(cdp-mp with M = 5 gives every stage two devices: the owner's replicas each
send the new value to the other end's replicas.)
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
M, STEPS, LR, MOMENTUM, B = 4, 3, 0.1, 0.9, 2


def forward(p, x):
    h = x
    for l in range(4):
        w = p["w0"] if l == 3 else p["w%d" % l]
        h = torch.tanh(h @ w + p["b%d" % l])
    return h


def train(start, x, y, stale):
    params = {n: v.clone().requires_grad_(True) for n, v in start.items()}
    momentum = {n: None for n in params}
    versions = [{n: v.detach().clone() for n, v in params.items()}]
    for t in range(STEPS):
        read = versions[max(t - 1, 0)] if stale else versions[t]
        used = {n: v.clone().requires_grad_(True) for n, v in read.items()}
        grads = {n: torch.zeros_like(v) for n, v in used.items()}
        for k in range(M):
            rows = slice((t * M + k) * B, (t * M + k + 1) * B)
            loss = torch.nn.functional.cross_entropy(forward(used, x[rows]), y[rows]) / M
            for n, g in zip(used, torch.autograd.grad(loss, list(used.values()))):
                grads[n] += g
        new = {}
        for n in used:
            momentum[n] = grads[n] if momentum[n] is None else MOMENTUM * momentum[n] + grads[n]
            new[n] = versions[t][n] - LR * momentum[n]
        versions.append(new)
    return versions[-1]


def main():
    global M
    bin_dir, work, strategy = sys.argv[1:4]
    if len(sys.argv) > 4:
        M = int(sys.argv[4])
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "tied.onnx")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "Import", "make_models.py"),
                    "mlp4tied", path], check=True)
    start = {t.name: torch.tensor(numpy_helper.to_array(t).copy())
             for t in onnx.load(path).graph.initializer}
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((M * STEPS * B, 16)).astype(np.float32))
    y = torch.tensor(rng.integers(0, 16, M * STEPS * B))
    np.save(os.path.join(work, "x.npy"), x.numpy())
    np.save(os.path.join(work, "y.npy"), y.numpy().astype(np.int64))
    final = train(start, x, y, stale=True)
    synchronous = train(start, x, y, stale=False)
    gap = max(float((final[n] - synchronous[n]).abs().max()) for n in final)
    print("%s reference differs from the synchronous one by %.1e" % ("ok  " if gap > 1e-4 else "FAIL", gap))
    plan = os.path.join(work, "plan.cdp")
    count = ["--micro-batches", str(M)]
    if strategy == "cdp-mp":
        count += ["--cdp-rule", "v1"]  # the 1-stale rule the reference computes
    subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan, "--strategy", strategy]
                   + count + ["--stage-boundaries", "tanh0,tanh1,tanh2", "--optimizer", "momentum",
                              "--lr", str(LR)], check=True)
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--feed", "x=" + os.path.join(work, "x.npy"),
                    "--feed", "labels=" + os.path.join(work, "y.npy"), "--steps", str(STEPS),
                    "--dump-params", os.path.join(work, "params")], check=True, stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(work, "params", "index.json")))
    failures = int(gap <= 1e-4)
    for n, want in final.items():
        got = np.load(os.path.join(work, "params", index[n]))
        ok = np.allclose(got, want.numpy(), atol=1e-5, rtol=1e-4)
        failures += not ok
        print("%s %-3s max abs error %.2e" % ("ok  " if ok else "FAIL", n, np.abs(got - want.numpy()).max()))
    print("tied %s M=%d: %s" % (strategy, M, "all match" if not failures else "%d mismatches" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
