"""PyTorch's side of tied_reference.py (imported only where a reference is
made: the suites' second pass reads it from the reference cache).

The 4-layer MLP whose last layer reuses the first one's weight, trained with
SGD and momentum on M micro-batches a step: synchronously, 1-stale (2bw,
cdp-mp) or with CDP-v2's per-stage delays.
"""
import torch

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
