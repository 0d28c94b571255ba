#!/usr/bin/python3
"""Trains laysa plans on N devices and compares them with the mirror weight
update evaluated independently: PyTorch computes each worker's gradient of
each step, NumPy (float32) the error feedback, the top-k selections and the
mean of the selections.

Usage: laysa_reference.py BIN_DIR WORK_DIR MODEL [DENSITY]

MODEL: deep_mlp or cnn of dp_reference.py (4 pinned stages, one per layer).
N = 4 workers, 10 steps of SGD with momentum 0.9 and weight decay 1e-3,
parameters below 64 elements sent whole. Per worker n and parameter:
  absorb   d = g_n + wd W;  u_n = mu u_n + d (u_n = d at first);  M_n -= lr u_n
  select   a = W - M_n;  I_n = the k largest |a| (lowest index on ties)
  apply    S = (sum_n a[I_n] at I_n) / N;  W -= S;  M_n -= S;  M_n[I_n] += a[I_n]
The naive baseline (--sparse-baseline residual) keeps r_n instead:
  r_n += lr u_n;  I_n = top-k of |r_n|;  W -= S;  r_n[I_n] = 0.
Prints, per form, whether cdp's parameters after 10 steps equal the
reference's within 1e-6 absolute, and the fraction of selections (worker,
step, parameter) in which the two forms chose different entries.
"""

import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_reference as ref  # noqa: E402

N, STEPS, LR, MOMENTUM, DECAY, DENSE_BELOW = 4, 10, 0.05, 0.9, 1e-3, 64
TOLERANCE = 1e-6


def top_k(a, k):
    """The k entries of largest magnitude, lowest index first among equal
    magnitudes; ascending."""
    order = np.lexsort((np.arange(a.size), -np.abs(a)))
    return np.sort(order[:k])


def gradients(model, weights, x, y, t):
    """Every worker's gradients of step t at the shared weights."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name]))
    result = []
    for n in range(N):
        model.zero_grad()
        k = t * N + n
        out = model(x[k * ref.B:(k + 1) * ref.B])
        torch.nn.functional.cross_entropy(out, y[k * ref.B:(k + 1) * ref.B]).backward()
        result.append({name: p.grad.numpy().ravel().copy() for name, p in model.named_parameters()})
    return result


def train(model, start, x, y, density, residual):
    """10 steps of the mirror form (or the residual form); returns the
    weights and every selection made."""
    W = {name: v.ravel().copy() for name, v in start.items()}
    state = [{name: (np.zeros_like(v) if residual else v.copy()) for name, v in W.items()}
             for _ in range(N)]
    momentum = [{} for _ in range(N)]
    chosen = []
    lr, mu, wd = np.float32(LR), np.float32(MOMENTUM), np.float32(DECAY)
    scale = np.float32(1.0) / np.float32(N)
    for t in range(STEPS):
        grads = gradients(model, {k: v.reshape(start[k].shape) for k, v in W.items()}, x, y, t)
        for name in W:
            size = W[name].size
            k = size if size < DENSE_BELOW else min(size, max(1, int(np.ceil(density * size))))
            picks = []
            for n in range(N):
                d = grads[n][name] + wd * W[name]
                u = d if t == 0 else mu * momentum[n][name] + d
                momentum[n][name] = u
                if residual:
                    state[n][name] += lr * u
                    a = state[n][name].copy()
                else:
                    state[n][name] -= lr * u
                    a = W[name] - state[n][name]
                index = np.arange(size) if k == size else top_k(a, k)
                picks.append((index, a[index]))
                chosen.append((t, n, name, tuple(index)))
            total = np.zeros(size, np.float32)
            touched = np.zeros(size, bool)
            for index, values in picks:  # device order, as cdp sums
                np.add.at(total, index, values)
                touched[index] = True
            step = np.where(touched, total * scale, np.float32(0))
            W[name] = W[name] - step
            for n, (index, values) in enumerate(picks):
                if residual:
                    state[n][name][index] = 0
                elif k == size:
                    state[n][name] = W[name].copy()
                else:
                    state[n][name] = np.where(touched, state[n][name] - step, state[n][name])
                    state[n][name][index] += values
    return {name: W[name].reshape(start[name].shape) for name in W}, chosen


def run_cdp(bin_dir, work, path, boundaries, density, residual):
    plan = os.path.join(work, "laysa.cdp")
    out = os.path.join(work, "residual" if residual else "mirror")
    subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan, "--strategy", "laysa",
                    "--devices", str(N), "--stage-boundaries", ",".join(boundaries),
                    "--density", str(density), "--dense-below", str(DENSE_BELOW),
                    "--optimizer", "momentum", "--lr", str(LR), "--weight-decay", str(DECAY)]
                   + (["--sparse-baseline", "residual"] if residual else []), check=True)
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan,
                    "--feed", "input=" + os.path.join(work, "x.npy"),
                    "--feed", "labels=" + os.path.join(work, "y.npy"),
                    "--steps", str(STEPS), "--dump-params", out], check=True, stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(out, "index.json")))
    return {name: np.load(os.path.join(out, file)) for name, file in index.items()}


def main():
    bin_dir, work, model_name = sys.argv[1:4]
    density = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
    os.makedirs(work, exist_ok=True)
    ref.N = N
    model, path, boundaries, x, y = ref.export_model(model_name, work, STEPS)
    start = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    failures = 0
    selections = {}
    for residual in (False, True):
        want, selections[residual] = train(model, start, x, y, density, residual)
        got = run_cdp(bin_dir, work, path, boundaries, density, residual)
        worst = max(float(np.abs(got[name] - want[name]).max()) for name in want)
        moved = max(float(np.abs(want[name] - start[name]).max()) for name in want)
        ok = worst <= TOLERANCE and moved > 1e-3
        failures += not ok
        print("%s %s %s density %g: cdp vs reference max abs error %.1e (weights moved %.1e)"
              % ("ok  " if ok else "FAIL", model_name, "residual" if residual else "mirror",
                 density, worst, moved))
    differ = sum(a != b for a, b in zip(selections[False], selections[True]))
    print("%s: %d of %d selections differ between the mirror and residual forms (%.2f %%)"
          % (model_name, differ, len(selections[False]), 100.0 * differ / len(selections[False])))
    print("%s laysa: %s" % (model_name, "all match" if not failures else "%d mismatches" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
