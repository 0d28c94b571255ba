#!/usr/bin/python3
"""Trains torchvision models one step in cdp and checks every gradient.

Usage: torchvision_check.py CDP_BIN_DIR WORK_DIR MODEL [MODEL ...] [--steps S]

Each MODEL (a torchvision.models builder name, random init, 10 classes) is
exported as the user guide says (training mode, opset 14, no constant
folding; Dropout modules with p = 0 so both sides compute the same function),
and trained from the exported weights on one fixed batch of 2 images:

  - in PyTorch at float32 and at float64 (the reference);
  - in cdp (cdp-compile, cdp-run --steps 1 --dump-grads).

For every parameter p the error of a side is max|g - g64| / max|g64|, the
gradient's distance from the float64 one relative to its largest entry.
cdp passes where its error is at most 10 x max(torch float32 error, 1e-5):
within ten times PyTorch's own rounding. One line per model; the worst
parameter is named. With --steps S > 1, the loss of each of S SGD steps is
also compared (to 1e-4 relative). Exits 1 on any failure.

A gradient is a step function of an activation's input at a kink (ReLU at
0, ReLU6 at 0 and 6, the hard functions at -3 and 3): an input within
float32 rounding of one may land on either side in any float32
implementation, PyTorch's included, and move a whole channel's gradient.
Of a few batches the one whose inputs keep furthest from the kinks is used,
and a failure with an input within KINK_MARGIN roundings of a kink is
reported as KINK (inconclusive) rather than FAIL; the model is then checked
again with the next weight seed (up to SEED_TRIES draws), and it matches only
where a draw passes.

Environment (for reproducing reports): TV_OPSET (default 14), TV_BATCH,
TV_SIDE, TV_SEED (the first weight seed, default 0), TV_CLASSES (default 10).
"""

import copy
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
import torch
import torchvision
from onnx import numpy_helper

import reference_cache

LR = 0.01
FLOOR = 1e-5
FACTOR = 10.0

# Image side per model: the smallest that keeps each model's adaptive pools
# exportable (torch exports AdaptiveAvgPool only where the input divides).
IMAGE_SIDE = {"alexnet": 224, "vgg11_bn": 224, "vgg11": 224}
# Batch per model: 8, where BatchNorm's statistics over the last stages'
# 2x2 maps are well conditioned (at batch 2 they rest on 8 values, and a
# ReLU input within float32 rounding of zero flips its gradient in either
# implementation); 2 for the 224-pixel models, whose maps are larger.
BATCH = {"alexnet": 2, "vgg11_bn": 2, "vgg11": 2}


def build(name, seed):
    torch.manual_seed(seed)
    kwargs = {"num_classes": int(os.environ.get("TV_CLASSES", "10"))}
    if name == "googlenet":
        kwargs.update(aux_logits=False, init_weights=True)
    if name.startswith("vit_"):
        kwargs["image_size"] = 64
    model = getattr(torchvision.models, name)(**kwargs)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        # torchvision's stochastic depth is a no-op at p = 0 as well.
        if module.__class__.__name__ == "StochasticDepth":
            module.p = 0.0
    return model


def export(model, name, work):
    side = int(os.environ.get("TV_SIDE", IMAGE_SIDE.get(name, 64)))
    example = torch.randn(int(os.environ.get("TV_BATCH", BATCH.get(name, 8))), 3, side, side)
    path = os.path.join(work, name + ".onnx")
    torch.onnx.export(model, example, path, input_names=["input"],
                      output_names=["logits"], opset_version=int(os.environ.get("TV_OPSET", "14")),
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    return path, example.shape


def load_exported(model, path):
    exported = onnx.load(path)
    state = {t.name: torch.tensor(numpy_helper.to_array(t).copy())
             for t in exported.graph.initializer}
    own = model.state_dict()  # keeps the modules' version metadata
    for key in own:
        if key in state:
            own[key] = state[key]
    model.load_state_dict(own)


# Where an activation has a kink (ReLU at 0, ReLU6 at 0 and 6, the hard
# functions at -3 and 3): the gradient jumps there, so an input within
# float32 rounding of a kink makes any float32 gradient differ from the
# float64 one by the jump, in PyTorch as in cdp.
KINKS = {"ReLU": (0.0,), "ReLU6": (0.0, 6.0), "Hardtanh": (-1.0, 1.0),
         "Hardswish": (-3.0, 3.0), "Hardsigmoid": (-3.0, 3.0)}
KINK_MARGIN = 10.0
SEED_TRIES = 3  # weight draws per model while the result is KINK
BATCH_TRIES = 4


def record_activation_inputs(model, into):
    for name, module in model.named_modules():
        kinks = KINKS.get(type(module).__name__)
        if kinks is None:
            continue
        if type(module).__name__ == "Hardtanh":
            kinks = (module.min_val, module.max_val)

        def hook(_, inputs, name=name, kinks=kinks):
            if name not in into:  # the first step's
                into[name] = (inputs[0].detach().double().clone(), kinks)
        module.register_forward_pre_hook(hook)


def nearest_kink(inputs32, inputs64):
    """The activation input closest to a kink, in units of float32's
    rounding of that input (PyTorch float32 against float64): below
    KINK_MARGIN, the float32 gradient is not defined to float32 precision."""
    worst = (float("inf"), "")
    for name, (x64, kinks) in inputs64.items():
        noise = (inputs32[name][0] - x64).abs().max().item()
        scale = max(noise, 1e-7 * x64.abs().max().item(), 1e-30)
        distance = min((x64 - k).abs().min().item() for k in kinks)
        worst = min(worst, (distance / scale, name))
    return worst


def torch_grads(model, x, y, steps, dtype, activations=None):
    model = copy.deepcopy(model).to(dtype)
    if activations is not None:
        record_activation_inputs(model, activations)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses, grads = [], None
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to(dtype)), y)
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            grads = {n: p.grad.detach().double().numpy().copy()
                     for n, p in model.named_parameters()}
        opt.step()
    return losses, grads


def run_cdp(bin_dir, work, path, steps):
    plan = path[:-5] + ".cdp"
    subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan,
                    "--optimizer", "sgd", "--lr", str(LR)], check=True)
    metrics = os.path.join(work, "metrics.jsonl")
    grads = os.path.join(work, "grads")
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan,
                    "--feed", "input=" + os.path.join(work, "x.npy"),
                    "--feed", "labels=" + os.path.join(work, "y.npy"),
                    "--steps", "1", "--metrics", metrics, "--dump-grads", grads],
                   check=True, stdout=subprocess.DEVNULL)
    index = json.load(open(os.path.join(grads, "index.json")))
    result = {k: np.load(os.path.join(grads, v)).astype(np.float64)
              for k, v in index.items()}
    losses = [json.loads(line)["loss"] for line in open(metrics)]
    if steps > 1:
        subprocess.run([os.path.join(bin_dir, "cdp-run"), plan,
                        "--feed", "input=" + os.path.join(work, "x.npy"),
                        "--feed", "labels=" + os.path.join(work, "y.npy"),
                        "--steps", str(steps), "--metrics", metrics],
                       check=True, stdout=subprocess.DEVNULL)
        losses = [json.loads(line)["loss"] for line in open(metrics)]
    return losses, result


def relative_error(got, want):
    scale = np.abs(want).max()
    return np.abs(got - want).max() / scale if scale > 0 else np.abs(got).max()


def reference(name, seed, steps, into):
    """PyTorch's side of one model, written to `into`: the export
    (model.onnx), the batch (x.npy, y.npy), the float64 gradients of the
    first step (grads64.npz) and reference.json (float64 losses, PyTorch's
    float32 error per parameter, the nearest kink)."""
    model = build(name, seed)
    path, shape = export(model, name, into)
    os.replace(path, os.path.join(into, "model.onnx"))
    load_exported(model, os.path.join(into, "model.onnx"))
    # The batch whose activation inputs keep furthest from the kinks (the
    # first that keeps KINK_MARGIN roundings clear, else the best of a few),
    # so that float32 gradients are defined to float32 precision.
    best = None
    for batch_seed in range(1, 1 + BATCH_TRIES):
        torch.manual_seed(batch_seed)
        x = torch.randn(*shape)
        y = torch.randint(0, int(os.environ.get("TV_CLASSES", "10")), (shape[0],))
        inputs32, inputs64 = {}, {}
        losses32, grads32 = torch_grads(model, x, y, steps, torch.float32, inputs32)
        losses64, grads64 = torch_grads(model, x, y, steps, torch.float64, inputs64)
        margin, at = nearest_kink(inputs32, inputs64)
        if best is None or margin > best[0][0]:
            best = ((margin, at), x, y, losses64, grads32, grads64)
        if margin >= KINK_MARGIN:
            break
    (margin, at), x, y, losses64, grads32, grads64 = best
    np.save(os.path.join(into, "x.npy"), x.numpy())
    np.save(os.path.join(into, "y.npy"), y.numpy().astype(np.int64))
    np.savez(os.path.join(into, "grads64.npz"), **grads64)
    torch_error = {p: float(relative_error(grads32[p], want)) for p, want in grads64.items()}
    with open(os.path.join(into, "reference.json"), "w") as f:
        json.dump({"losses64": losses64, "torch_error": torch_error,
                   "margin": margin, "at": at, "names": list(grads64)}, f)


def cached_reference(name, steps, seed, work):
    """reference()'s directory, from the test cache where lit keeps one
    (the plain and the sanitized suites make the same)."""
    key = (name, seed, steps, sorted((k, v) for k, v in os.environ.items() if k.startswith("TV_")))
    return reference_cache.entry(key, [os.path.abspath(__file__)],
                                 lambda into: reference(name, seed, steps, into),
                                 os.path.join(work, "reference"))


def check(bin_dir, root, name, steps, seed):
    """One model with weights drawn from `seed`: "ok", "FAIL" or "KINK"."""
    work = os.path.join(root, "%s-%d" % (name, seed))
    os.makedirs(work, exist_ok=True)
    start = time.time()
    ref = cached_reference(name, steps, seed, work)
    facts = json.load(open(os.path.join(ref, "reference.json")))
    margin, at, losses64 = facts["margin"], facts["at"], facts["losses64"]
    stored = np.load(os.path.join(ref, "grads64.npz"))
    grads64 = {p: stored[p] for p in facts["names"]}
    # cdp writes its plan beside the model: a copy in the work directory.
    path = os.path.join(work, name + ".onnx")
    shutil.copyfile(os.path.join(ref, "model.onnx"), path)
    for batch in ("x.npy", "y.npy"):
        shutil.copyfile(os.path.join(ref, batch), os.path.join(work, batch))
    cdp_losses, cdp_grads = run_cdp(bin_dir, work, path, steps)

    failures, worst = [], (0.0, "", 0.0, 0.0)
    for pname, want in grads64.items():
        if pname not in cdp_grads:
            failures.append("%s: no gradient" % pname)
            continue
        torch_error = facts["torch_error"][pname]
        cdp_error = relative_error(cdp_grads[pname].reshape(want.shape), want)
        bound = FACTOR * max(torch_error, FLOOR)
        ratio = cdp_error / bound
        if ratio > worst[0]:
            worst = (ratio, pname, cdp_error, torch_error)
        if cdp_error > bound:
            failures.append("%s: %.2e (torch %.2e)" % (pname, cdp_error, torch_error))
    for step, (got, want) in enumerate(zip(cdp_losses, losses64)):
        if abs(got - want) > 1e-4 * max(1.0, abs(want)):
            failures.append("loss of step %d: %.6f, torch %.6f" % (step, got, want))
    status = "ok  " if not failures else "FAIL"
    if failures and margin < KINK_MARGIN:
        status = "KINK"  # inconclusive: a float32 input sits at a kink
    print("%s %-20s seed %d, %3d params, worst %s at %.2e (torch fp32 %.2e, %.2f of the bound), "
          "nearest kink %.1f roundings (%s), %.0f s"
          % (status, name, seed, len(grads64), worst[1], worst[2], worst[3], worst[0],
             margin, at, time.time() - start), flush=True)
    for failure in failures[:5]:
        print("       " + failure)
    if len(failures) > 5:
        print("       ... %d more" % (len(failures) - 5))
    return status.strip()


def main():
    args = sys.argv[1:]
    steps = 1
    if "--steps" in args:
        at = args.index("--steps")
        steps = int(args[at + 1])
        del args[at:at + 2]
    bin_dir, root, names = args[0], args[1], args[2:]
    os.makedirs(root, exist_ok=True)
    torch.set_num_threads(2)
    ok = 0
    first_seed = int(os.environ.get("TV_SEED", "0"))
    for name in names:
        # An inconclusive draw (KINK) is a property of the weights and the
        # batch, not of cdp: draw the weights again, up to SEED_TRIES times.
        for seed in range(first_seed, first_seed + SEED_TRIES):
            try:
                status = check(bin_dir, root, name, steps, seed)
            except subprocess.CalledProcessError as error:
                print("FAIL %-20s %s exited %d" % (name, os.path.basename(error.cmd[0]),
                                                   error.returncode), flush=True)
                status = "FAIL"
            if status != "KINK":
                break
        ok += status == "ok"
    print("%d of %d models match" % (ok, len(names)))
    return 0 if ok == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
