#!/usr/bin/python3
"""Trains a reference model 3 SGD steps in PyTorch and in cdp, and compares.

Usage: torch_reference.py CDP_BIN_DIR WORK_DIR MODEL [OPTIMIZER]

MODEL is one of export_torch_models.py's (mlp, lenet, resnet, transformer).
Both sides start from the same exported weights and take 3 steps on one fixed
batch with the same optimizer (sgd lr 0.1 by default; momentum, adam and adamw
are also accepted). Checked, with the tolerance printed:
  - the loss of every step,
  - the gradients the last update applied (cdp-run --dump-grads, torch's
    p.grad after the third backward),
  - every parameter and BatchNorm buffer after the 3 steps.
Exits 1 on any mismatch and prints one line per checked tensor.
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

# float32 on both sides, different summation orders: agreement to 1e-5
# absolute is expected for gradients and parameters.
ATOL = 1e-5
RTOL = 1e-4
STEPS = 3
LR = 0.1
NAMES = []  # the model's parameter names, in parameters() order


def torch_optimizer(name, params):
    import torch
    if name == "sgd":
        return torch.optim.SGD(params, lr=LR)
    if name == "momentum":
        return torch.optim.SGD(params, lr=LR, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=LR / 100)
    if name == "adamw":  # decoupled weight decay, large enough to matter
        return torch.optim.AdamW(params, lr=LR / 100, weight_decay=0.5)
    if name == "adamw-groups":  # no decay on biases: two parameter groups
        params = list(params)
        named = dict(zip(NAMES, params))
        return torch.optim.AdamW(
            [{"params": [p for n, p in named.items() if not n.endswith(".bias")]},
             {"params": [p for n, p in named.items() if n.endswith(".bias")],
              "weight_decay": 0.0}], lr=LR / 100, weight_decay=0.5)
    if name == "momentum-step":
        return torch.optim.SGD(params, lr=LR, momentum=0.9)
    if name == "adam-cosine":
        return torch.optim.Adam(params, lr=LR / 100)
    raise SystemExit("unknown optimizer " + name)


def torch_scheduler(name, opt):
    """The learning-rate schedule, stepped after every optimizer step."""
    import torch
    if name == "momentum-step":  # halved every step: each update differs
        return torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    if name == "adam-cosine":  # cosine down to 1e-4 over 4 steps
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=1e-4)
    return None


def cdp_optimizer_flags(name):
    if name == "adam":
        return ["--optimizer", "adam", "--lr", str(LR / 100)]
    if name == "adamw":
        return ["--optimizer", "adamw", "--lr", str(LR / 100), "--weight-decay", "0.5"]
    if name == "adamw-groups":
        return ["--optimizer", "adamw", "--lr", str(LR / 100), "--weight-decay", "0.5",
                "--no-decay", "*.bias"]
    if name == "momentum-step":
        return ["--optimizer", "momentum", "--lr", str(LR), "--lr-schedule", "step",
                "--lr-period", "1", "--lr-gamma", "0.5"]
    if name == "adam-cosine":
        return ["--optimizer", "adam", "--lr", str(LR / 100), "--lr-schedule", "cosine",
                "--lr-period", "4", "--lr-min", "1e-4"]
    return ["--optimizer", name, "--lr", str(LR)]


def reference(name, optimizer, into):
    """PyTorch's side, written to `into`: the export (model.onnx), the batch
    (x.npy, y.npy), and reference.npz: the losses, the last step's
    gradients (`grad/NAME`), the parameters and BatchNorm buffers after the
    steps (`param/NAME`, `buffer/NAME`), with their names in order."""
    import torch
    import export_torch_models as models
    model, example, _ = models.build(name)
    path = models.export(name, into)
    os.replace(path, os.path.join(into, "model.onnx"))
    models.load_exported(model, os.path.join(into, "model.onnx"))

    torch.manual_seed(1)
    x = torch.randn(*example.shape)
    batch = example.shape[1] if name == "transformer" else example.shape[0]
    y = torch.randint(0, 10, (batch,))
    np.save(os.path.join(into, "x.npy"), x.numpy())
    np.save(os.path.join(into, "y.npy"), y.numpy().astype(np.int64))

    model.train()
    global NAMES
    NAMES = [n for n, _ in model.named_parameters()]
    opt = torch_optimizer(optimizer, model.parameters())
    scheduler = torch_scheduler(optimizer, opt)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss.item())
        opt.step()
        if scheduler:
            scheduler.step()
    arrays = {"losses": np.array(losses)}
    for pname, p in model.named_parameters():
        arrays["grad/" + pname] = p.grad.numpy()
        arrays["param/" + pname] = p.detach().numpy()
    buffers = [b for b, _ in model.named_buffers() if not b.endswith("num_batches_tracked")]
    for bname, b in model.named_buffers():
        if bname in buffers:
            arrays["buffer/" + bname] = b.numpy()
    np.savez(os.path.join(into, "reference.npz"), **arrays)
    with open(os.path.join(into, "names.json"), "w") as f:
        json.dump({"params": NAMES, "buffers": buffers, "batch": batch}, f)


def main():
    bin_dir, work, name = sys.argv[1:4]
    optimizer = sys.argv[4] if len(sys.argv) > 4 else "sgd"
    os.makedirs(work, exist_ok=True)
    # PyTorch's side once per content: the plain and the sanitized suites
    # reuse it (reference_cache.py).
    ref = reference_cache.entry(
        ("torch", name, optimizer),
        [os.path.abspath(__file__), os.path.join(HERE, "export_torch_models.py")],
        lambda into: reference(name, optimizer, into), os.path.join(work, "reference"))
    path = os.path.join(work, name + ".onnx")
    shutil.copyfile(os.path.join(ref, "model.onnx"), path)
    for batch_file in ("x.npy", "y.npy"):
        shutil.copyfile(os.path.join(ref, batch_file), os.path.join(work, batch_file))
    stored = np.load(os.path.join(ref, "reference.npz"))
    names = json.load(open(os.path.join(ref, "names.json")))
    batch = names["batch"]

    plan = os.path.join(work, name + ".cdp")
    compile_args = [os.path.join(bin_dir, "cdp-compile"), path, "-o", plan]
    compile_args += cdp_optimizer_flags(optimizer)
    if name == "transformer":
        compile_args += ["--batch-axis", "input=1"]
    if name == "mlp":
        compile_args += ["--batch-size", str(batch)]
    subprocess.run(compile_args, check=True)
    metrics = os.path.join(work, "metrics.jsonl")
    subprocess.run([os.path.join(bin_dir, "cdp-run"), plan,
                    "--feed", "input=" + os.path.join(work, "x.npy"),
                    "--feed", "labels=" + os.path.join(work, "y.npy"),
                    "--steps", str(STEPS), "--metrics", metrics,
                    "--dump-grads", os.path.join(work, "grads"),
                    "--dump-params", os.path.join(work, "params")],
                   check=True, stdout=subprocess.DEVNULL)

    failures = 0

    def check(what, got, want):
        nonlocal failures
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        error = np.abs(got - want).max() if got.size else 0.0
        ok = got.shape == want.shape and np.allclose(got, want, atol=ATOL, rtol=RTOL)
        failures += not ok
        print("%s %-45s max abs error %.2e" % ("ok  " if ok else "FAIL", what, error))

    cdp_losses = [json.loads(line)["loss"] for line in open(metrics)]
    check("loss of steps 0..2", cdp_losses, stored["losses"])

    def load(folder):
        index = json.load(open(os.path.join(work, folder, "index.json")))
        return {k: np.load(os.path.join(work, folder, v)) for k, v in index.items()}

    grads, params = load("grads"), load("params")
    for pname in names["params"]:
        check("grad " + pname, grads[pname], stored["grad/" + pname])
        check("param " + pname, params[pname], stored["param/" + pname])
    for bname in names["buffers"]:
        check("buffer " + bname, params[bname], stored["buffer/" + bname])
    print("%s: %s" % (name, "all match" if not failures else "%d mismatches" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
