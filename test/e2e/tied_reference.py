#!/usr/bin/python3
"""A weight tied across pipeline stages under 2bw and cdp-mp, against
PyTorch: the 4-layer MLP whose last Gemm reuses the first one's weight
(make_models.py mlp4tied), cut after every Tanh so the weight lives on
stages 1 and 4; M = 4 micro-batches per step, SGD with momentum 0.9. The
reference computes step t's gradients at W(max(t - 1, 0)) and applies them
to W(t) (W(t+1) = Opt(W(t), g(W(t-1)))), the tied weight's gradient being
the sum of both uses'. Parameters after 3 steps must match within 1e-5 +
1e-4 relative; the reference must differ from the synchronous one.

--clip X: each step's gradient (the tied weight's summed over its uses) is
clipped to a global norm of X by torch.nn.utils.clip_grad_norm_ before the
update, and the reference must clip at least once (2bw: the tied stage
sends its norm share before it takes the weight's new value).

Usage: tied_reference.py [--clip X] BIN_DIR WORK_DIR STRATEGY [M]
(cdp-mp with M = 5 gives every stage two devices: the owner's replicas each
send the new value to the other end's replicas.)

STRATEGY cdp-v2[-code]: CDP-v2 (timing or code table) for STEPS_V2 steps,
with --strategy cdp on M devices and cdp-mp with M micro-batches. Stage l of
micro-batch (i, t) reads W(t - d(i, l)); a micro-batch reads one version of
the tied weight, its owner's (stage 1): d(i, 1) on stage 4 too. Both must
match that reference within 1e-5 + 1e-4 relative and each other within
1e-6; the reference where stage 4 reads its own d(i, 4) must differ.
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
M, STEPS, STEPS_V2, LR, MOMENTUM, B = 4, 3, 6, 0.1, 0.9, 2
CLIP = 0.0
CLIPPED = [0]


def clip_grads(grads):
    """torch's clip_grad_norm_ on the step's gradients (CLIP: none)."""
    if not CLIP:
        return
    holders = []
    for n, g in grads.items():
        holder = torch.zeros_like(g, requires_grad=True)
        holder.grad = g
        holders.append(holder)
    CLIPPED[0] += float(torch.nn.utils.clip_grad_norm_(holders, CLIP)) > CLIP
    for n, holder in zip(grads, holders):
        grads[n] = holder.grad


def forward(p, x, tied=None):
    """The model; the last layer reuses w0, or `tied` where given (a
    version of w0 other than the first layer's)."""
    h = x
    for l in range(4):
        w = (p["w0"] if tied is None else tied) if l == 3 else p["w%d" % l]
        h = torch.tanh(h @ w + p["b%d" % l])
    return h


def momentum_step(version, grads, momentum):
    """SGD with momentum (PyTorch's: the first step sets the buffer) on
    `version`; updates `momentum` in place and returns the new version."""
    new = {}
    for n in version:
        momentum[n] = grads[n] if momentum[n] is None else MOMENTUM * momentum[n] + grads[n]
        new[n] = version[n] - LR * momentum[n]
    return new


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
        clip_grads(grads)
        versions.append(momentum_step(versions[t], grads, momentum))
    return versions[-1]


def v2_delay(m, table, stages=4):
    """d(i, l) of CDP-v2, from the formulas (offsets s_i = floor(2Li/N))."""
    offsets = [(2 * stages * i) // m for i in range(m)]
    fresh = (lambda i, l: 2 * l - 1 > offsets[m - 1] - offsets[i]) if table == "timing" \
        else (lambda i, l: l >= stages - i)
    return [[0 if fresh(i, l) else 1 for l in range(1, stages + 1)] for i in range(m)]


def train_v2(start, x, y, delay, tied_stage, steps):
    """CDP-v2 evaluated sequentially; the tied weight's use on stage 4 reads
    the version of stage `tied_stage` (1: the owner's)."""
    momentum = {n: None for n in start}
    versions = [start]
    for t in range(steps):
        grads = {n: torch.zeros_like(v) for n, v in start.items()}
        for i in range(M):
            def read(n, stage):
                return versions[max(t - delay[i][stage - 1], 0)][n].clone().requires_grad_(True)
            used = {"w%d" % l: read("w%d" % l, l + 1) for l in range(3)}
            used.update({"b%d" % l: read("b%d" % l, l + 1) for l in range(4)})
            tied = read("w0", tied_stage)
            rows = slice((t * M + i) * B, (t * M + i + 1) * B)
            loss = torch.nn.functional.cross_entropy(forward(used, x[rows], tied), y[rows]) / M
            leaves = list(used.values()) + [tied]
            got = torch.autograd.grad(loss, leaves)
            for n, g in zip(list(used) + ["w0"], got):
                grads[n] += g
        versions.append(momentum_step(versions[t], grads, momentum))
    return versions[-1]


def run_plan(bin_dir, work, path, name, args, steps):
    plan = os.path.join(work, name + ".cdp")
    if CLIP:
        args = args + ["--clip-grad-norm", str(CLIP)]
    subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan] + args
                   + ["--stage-boundaries", "tanh0,tanh1,tanh2", "--optimizer", "momentum",
                      "--lr", str(LR)], check=True)
    out = os.path.join(work, name)
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--feed", "x=" + os.path.join(work, "x.npy"),
                    "--feed", "labels=" + os.path.join(work, "y.npy"), "--steps", str(steps),
                    "--dump-params", out], check=True, stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(out, "index.json")))
    return {n: np.load(os.path.join(out, f)) for n, f in index.items()}


def check_v2(bin_dir, work, path, start, x, y, table):
    steps = STEPS_V2
    delay = v2_delay(M, table)
    want = train_v2(start, x, y, delay, 1, steps)
    own = train_v2(start, x, y, delay, 4, steps)
    gap = max(float((want[n] - own[n]).abs().max()) for n in want)
    failures = int(gap <= 1e-5)
    print("%s reading stage 4's own version differs by %.1e" % ("ok  " if gap > 1e-5 else "FAIL", gap))
    rule = ["--cdp-rule", "v2", "--v2-table", table]
    got = {"cdp": run_plan(bin_dir, work, path, "cdp", ["--strategy", "cdp", "--devices", str(M)] + rule, steps),
           "cdp-mp": run_plan(bin_dir, work, path, "cdp-mp",
                              ["--strategy", "cdp-mp", "--micro-batches", str(M)] + rule, steps)}
    for strategy, params in got.items():
        for n, w in want.items():
            ok = np.allclose(params[n], w.numpy(), atol=1e-5, rtol=1e-4)
            failures += not ok
            print("%s %-6s %-3s max abs error %.2e" % ("ok  " if ok else "FAIL", strategy, n,
                                                      np.abs(params[n] - w.numpy()).max()))
    apart = max(float(np.abs(got["cdp"][n] - got["cdp-mp"][n]).max()) for n in want)
    failures += apart > 1e-6
    print("%s cdp-mp and cdp %d steps apart by %.1e" % ("ok  " if apart <= 1e-6 else "FAIL", steps, apart))
    print("tied cdp-v2 %s M=%d: %s" % (table, M, "all match" if not failures else "%d mismatches" % failures))
    return 1 if failures else 0


def main():
    global M, CLIP
    argv = sys.argv[1:]
    if argv[:1] == ["--clip"]:
        CLIP = float(argv[1])
        argv = argv[2:]
    bin_dir, work, strategy = argv[:3]
    if len(argv) > 3:
        M = int(argv[3])
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "tied.onnx")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "Import", "make_models.py"),
                    "mlp4tied", path], check=True)
    start = {t.name: torch.tensor(numpy_helper.to_array(t).copy())
             for t in onnx.load(path).graph.initializer}
    rng = np.random.default_rng(0)
    rows = M * max(STEPS, STEPS_V2) * B
    x = torch.tensor(rng.standard_normal((rows, 16)).astype(np.float32))
    y = torch.tensor(rng.integers(0, 16, rows))
    np.save(os.path.join(work, "x.npy"), x.numpy())
    np.save(os.path.join(work, "y.npy"), y.numpy().astype(np.int64))
    if strategy.startswith("cdp-v2"):
        return check_v2(bin_dir, work, path, start, x, y,
                        "code" if strategy.endswith("code") else "timing")
    synchronous = train(start, x, y, stale=False)
    CLIPPED[0] = 0
    final = train(start, x, y, stale=True)
    gap = max(float((final[n] - synchronous[n]).abs().max()) for n in final)
    print("%s reference differs from the synchronous one by %.1e" % ("ok  " if gap > 1e-4 else "FAIL", gap))
    count = ["--micro-batches", str(M)]
    if strategy == "cdp-mp":
        count += ["--cdp-rule", "v1"]  # the 1-stale rule the reference computes
    params = run_plan(bin_dir, work, path, "params", ["--strategy", strategy] + count, STEPS)
    failures = int(gap <= 1e-4)
    if CLIP:
        print("%s the reference clipped %d of %d steps" % ("ok  " if CLIPPED[0] else "FAIL", CLIPPED[0], STEPS))
        failures += not CLIPPED[0]
    for n, want in final.items():
        got = params[n]
        ok = np.allclose(got, want.numpy(), atol=1e-5, rtol=1e-4)
        failures += not ok
        print("%s %-3s max abs error %.2e" % ("ok  " if ok else "FAIL", n, np.abs(got - want.numpy()).max()))
    print("tied %s M=%d: %s" % (strategy, M, "all match" if not failures else "%d mismatches" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
