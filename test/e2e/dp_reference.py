#!/usr/bin/python3
"""Trains with cdp's dp/cdp plans on N devices and compares with the update
rule of algorithms.md evaluated sequentially in PyTorch.

Usage: dp_reference.py [--clip X] BIN_DIR WORK_DIR MODEL STRATEGY [RULE [TABLE [N]]]

MODEL: deep_mlp (4 Linear layers) or cnn (conv, conv, fc, fc; BatchNorm
after the first conv), each cut into 4 pinned stages, one per layer.
STRATEGY: dp or cdp; RULE v1|v2, TABLE timing|code (cdp only).

References (N micro-batches per step, default 4; SGD with momentum 0.9):
  dp      theta_{t+1} = Opt(theta_t, mean_i grad(theta_t; x_it))
  cdp-v1  theta_{t+1} = Opt(theta_t, mean_i grad(theta_{t-1}; x_it)),
          theta_{-1} = theta_0
  cdp-v2  stage l of micro-batch (i, t) uses theta_{t - d(i,l)} with
          d(i,l) = 0 when (i, l) is fresh: timing table 2l-1 > s_{N-1}-s_i,
          code table l >= L - i; offsets s_i = floor(2L i / N).
With --clip X (gradient clipping by global norm): dp clips the step's mean
gradient (torch.nn.utils.clip_grad_norm_ on it); cdp clips each micro-batch's
own gradient before it enters the mean (the authors' code clips the local
gradient before the all-reduce), and since that norm needs every stage's
gradient, the reductions start after the whole backward: the timing table's
fresh condition becomes l > s_{N-1} - s_i.
BatchNorm uses per-micro-batch statistics. The version table is computed
here from the formulas, independently of the compiler. Every parameter after
STEPS steps must match within 1e-5 + 1e-4 relative.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference_cache  # noqa: E402

N, L, B, STEPS, LR, MOMENTUM = 4, 4, 4, 5, 0.05, 0.9
CLIP = 0.0  # --clip: 0 is off
ATOL, RTOL = 1e-5, 1e-4


def model_class(model_name):
    """The model's torch module class (torch is imported only where a
    reference is computed: reference_cache.py)."""
    import torch
    from torch import nn

    class DeepMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(12, 16), nn.Linear(16, 16)
            self.fc3, self.fc4 = nn.Linear(16, 16), nn.Linear(16, 5)

        def forward(self, x):
            x = torch.tanh(self.fc1(x))
            x = torch.tanh(self.fc2(x))
            x = torch.tanh(self.fc3(x))
            return self.fc4(x)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
            self.conv2 = nn.Conv2d(4, 6, 3, padding=1)
            self.fc1, self.fc2 = nn.Linear(6 * 4 * 4, 16), nn.Linear(16, 5)

        def forward(self, x):
            x = torch.relu(self.bn1(self.conv1(x)))
            x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
            x = torch.relu(self.fc1(x.flatten(1)))
            return self.fc2(x)

    return DeepMLP if model_name == "deep_mlp" else CNN


# Parameters of each stage (one stage per layer), and the last ONNX node of
# each of the first three stages (where the cuts go).
STAGES = {
    "deep_mlp": [["fc1"], ["fc2"], ["fc3"], ["fc4"]],
    "cnn": [["conv1", "bn1"], ["conv2"], ["fc1"], ["fc2"]],
}
INPUT = {"deep_mlp": (B, 12), "cnn": (B, 1, 8, 8)}


def version_delay(strategy, rule, table):
    offsets = [(2 * L * i) // N for i in range(N)] if strategy != "dp" else [0] * N
    delay = [[0] * L for _ in range(N)]
    for i in range(N):
        for l in range(1, L + 1):
            if strategy == "dp":
                d = 0
            elif rule == "v1":
                d = 1
            elif table == "timing" and CLIP:
                d = 0 if l > offsets[N - 1] - offsets[i] else 1
            elif table == "timing":
                d = 0 if 2 * l - 1 > offsets[N - 1] - offsets[i] else 1
            else:
                d = 0 if l >= L - i else 1
            delay[i][l - 1] = d
    return delay


def stage_of(name, model_name):
    for l, prefixes in enumerate(STAGES[model_name]):
        if name.split(".")[0] in prefixes:
            return l
    raise KeyError(name)


def clip_(tensors, strategy):
    """clip_grad_norm_ on these gradients; returns whether it scaled them."""
    import torch
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in tensors)).float()
    coefficient = min(CLIP / (float(total) + 1e-6), 1.0)
    for g in tensors:
        g.mul_(coefficient)
    return coefficient < 1.0


def reference(model, model_name, names, start, start_buffers, x, y, delay, strategy):
    """The update rule evaluated sequentially, every version kept."""
    import torch
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(start_buffers[n])
    history = [start]
    momentum = {n: None for n in names}
    for t in range(STEPS):
        grads = {n: torch.zeros_like(history[-1][n]) for n in names}
        for i in range(N):
            # Weights of micro-batch (i, t), stage by stage.
            with torch.no_grad():
                for n, p in model.named_parameters():
                    version = max(t - delay[i][stage_of(n, model_name)], 0)
                    p.copy_(history[version][n])
            model.zero_grad()
            k = t * N + i
            out = model(x[k * B:(k + 1) * B])
            torch.nn.functional.cross_entropy(out, y[k * B:(k + 1) * B]).backward()
            if CLIP and strategy == "cdp":
                CLIPPED[0] += clip_([p.grad for p in model.parameters()], strategy)
            for n, p in model.named_parameters():
                grads[n] += p.grad / N
        if CLIP and strategy == "dp":
            CLIPPED[0] += clip_(list(grads.values()), strategy)
        new = {}
        for n in names:
            g = grads[n]
            momentum[n] = g.clone() if momentum[n] is None else MOMENTUM * momentum[n] + g
            new[n] = history[-1][n] - LR * momentum[n]
        history.append(new)

    return history[-1]


CLIPPED = [0]  # how many clips scaled something


def export_model(model_name, work, steps):
    """The model exported to ONNX in WORK_DIR with cdp's initial weights
    loaded back, the stage cuts (one layer each) and the data of `steps`
    steps of N micro-batches (saved as x.npy and y.npy)."""
    import torch
    from export_torch_models import load_exported
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    model = model_class(model_name)()
    example = torch.randn(*INPUT[model_name])
    path = os.path.join(work, model_name + ".onnx")
    model.train()
    torch.onnx.export(model, example, path, input_names=["input"], output_names=["logits"],
                      opset_version=14, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    exported = load_exported(model, path)
    # Cut after the last node of each layer's block: the node just before
    # the next stage's first parameterised node.
    nodes = [n for n in exported.graph.node]
    first_of_stage = []
    for prefixes in STAGES[model_name][1:]:
        first_of_stage.append(next(i for i, n in enumerate(nodes)
                                   if any(inp.split(".")[0] in prefixes for inp in n.input)))
    boundaries = [nodes[i - 1].name for i in first_of_stage]

    rows = N * B * steps
    x = torch.randn(rows, *INPUT[model_name][1:])
    y = torch.randint(0, 5, (rows,))
    np.save(os.path.join(work, "x.npy"), x.numpy())
    np.save(os.path.join(work, "y.npy"), y.numpy().astype(np.int64))

    return model, path, boundaries, x, y


def torch_side(model_name, strategy, rule, table, into):
    """The export, the batches, and the reference's parameters after STEPS
    steps under `strategy`'s rule and under dp's (final.npz), with the stage
    cuts and how many clips acted (reference.json), written to `into`."""
    model, path, boundaries, x, y = export_model(model_name, into, STEPS)
    os.replace(path, os.path.join(into, "model.onnx"))
    names = [n for n, _ in model.named_parameters()]
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    start_buffers = {n: b.clone() for n, b in model.named_buffers()}
    final = reference(model, model_name, names, start, start_buffers, x, y,
                      version_delay(strategy, rule, table), strategy)
    clipped = CLIPPED[0]
    # A cdp rule must make a difference, or the comparison proves nothing.
    dp_final = reference(model, model_name, names, start, start_buffers, x, y,
                         version_delay("dp", rule, table), strategy)
    arrays = {"final/" + n: final[n].numpy() for n in names}
    arrays.update({"dp/" + n: dp_final[n].numpy() for n in names})
    np.savez(os.path.join(into, "final.npz"), **arrays)
    with open(os.path.join(into, "reference.json"), "w") as f:
        json.dump({"names": names, "boundaries": boundaries, "clipped": clipped}, f)


def main():
    global N, CLIP
    argv = sys.argv[:]
    if "--clip" in argv:
        at = argv.index("--clip")
        CLIP = float(argv[at + 1])
        del argv[at:at + 2]
    bin_dir, work, model_name, strategy = argv[1:5]
    rule = argv[5] if len(argv) > 5 else "v2"
    table = argv[6] if len(argv) > 6 else "timing"
    N = int(argv[7]) if len(argv) > 7 else N
    os.makedirs(work, exist_ok=True)
    # PyTorch's side once per content: the plain and the sanitized suites
    # reuse it (reference_cache.py).
    ref = reference_cache.entry(
        ("dp", model_name, strategy, rule, table, N, CLIP),
        [os.path.abspath(__file__), os.path.join(HERE, "export_torch_models.py")],
        lambda into: torch_side(model_name, strategy, rule, table, into),
        os.path.join(work, "reference"))
    facts = json.load(open(os.path.join(ref, "reference.json")))
    names, boundaries, clipped = facts["names"], facts["boundaries"], facts["clipped"]
    path = os.path.join(work, model_name + ".onnx")
    shutil.copyfile(os.path.join(ref, "model.onnx"), path)
    for batch in ("x.npy", "y.npy"):
        shutil.copyfile(os.path.join(ref, batch), os.path.join(work, batch))
    stored = np.load(os.path.join(ref, "final.npz"))
    final = {n: stored["final/" + n] for n in names}
    dp_final = {n: stored["dp/" + n] for n in names}

    plan = os.path.join(work, "plan.cdp")
    # cdp-mp: N CDP slots share the devices of the L stages (derived, 2.6).
    count = ["--micro-batches", str(N)] if strategy == "cdp-mp" else ["--devices", str(N)]
    args = [os.path.join(bin_dir, "cdp-compile"), path, "-o", plan, "--strategy", strategy] + count + [
            "--stage-boundaries", ",".join(boundaries),
            "--optimizer", "momentum", "--lr", str(LR)]
    if strategy == "cdp":
        args += ["--cdp-rule", rule, "--v2-table", table]
    if CLIP:
        args += ["--clip-grad-norm", str(CLIP)]
    if strategy == "cdp-mp":
        args += ["--cdp-rule", rule, "--v2-table", table]
    subprocess.run(args, check=True)
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan,
                    "--feed", "input=" + os.path.join(work, "x.npy"),
                    "--feed", "labels=" + os.path.join(work, "y.npy"),
                    "--steps", str(STEPS), "--dump-params", os.path.join(work, "params")],
                   check=True, stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(work, "params", "index.json")))
    failures = 0
    for n in names:
        got = np.load(os.path.join(work, "params", index[n]))
        want = final[n]
        ok = np.allclose(got, want, atol=ATOL, rtol=RTOL)
        # Also make sure the rule matters: the dp reference must differ for cdp.
        failures += not ok
        print("%s param %-14s max abs error %.2e" % ("ok  " if ok else "FAIL", n,
                                                      np.abs(got - want).max()))
    if strategy != "dp":
        spread = max(float(np.abs(final[n] - dp_final[n]).max()) for n in names)
        print("%s reference differs from dp's by %.2e" % ("ok  " if spread > 1e-4 else "FAIL", spread))
        failures += spread <= 1e-4
    label = strategy if strategy == "dp" else "%s-%s%s" % (strategy, rule, "" if rule == "v1" else "-" + table)
    label += " N=%d" % N
    if CLIP:
        # The clip must act, or the comparison proves nothing about it.
        print("%s the reference clipped %d gradients" % ("ok  " if clipped else "FAIL", clipped))
        failures += not clipped
        label += " clip"
    print("%s %s: %s" % (model_name, label, "all match" if not failures else "%d mismatches" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
