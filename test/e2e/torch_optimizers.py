#!/usr/bin/python3
"""20 steps of the training controls against PyTorch, for every strategy.

Usage: torch_optimizers.py CDP_BIN_DIR WORK_DIR MODEL

MODEL is the MLP or LeNet of export_torch_models.py (no BatchNorm, so every
strategy below is the same computation). PyTorch trains it 20 steps on a
global batch of 4 micro-batches of 8 samples (fresh rows every step), for
each optimizer setting: AdamW with a parameter group that takes no decay
on biases and a cosine schedule; momentum SGD with a step schedule; SGD with
a linear warmup and a linear decay (SequentialLR of two LinearLR);
momentum SGD with clip_grad_norm_ before each step. cdp
trains the same steps under single (--micro-batches 4: one update of the
4 micro-batches' mean gradient), dp on 4 devices, and the synchronous
pipelines with 4 micro-batches: 1f1b, gpipe and zb-h1 on 2 stages,
interleaved-1f1b on 4 stages over 2 devices (2bw and cdp-mp update from
1-stale weights by design: a different computation); every trained
parameter must equal PyTorch's to 1e-5
absolute (+1e-4 relative). Prints one line per (setting, strategy).

AdamW runs at lr 1e-4 with epsilon 1e-3 and weight decay 1.0: with the
defaults (lr 1e-3, epsilon 1e-8) a gradient that is float noise around zero
(a dead ReLU unit, a max-pool tie; its sign depends on the summation order)
becomes a step of nearly lr in either direction, and 20 such steps on LeNet
differ by ~1e-3 between two correct implementations (measured: Adam alone,
1.1e-3). Here the update stays proportional to the gradient, while the
decay (1e-4 of each weight a step), the bias group and the schedule each
still move the weights by far more than the tolerance (dropping
--no-decay fails by 1.3e-4 on the MLP).
"""

import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torch_models as models  # noqa: E402

STEPS, MICRO, BATCH = 20, 4, 8
ATOL, RTOL = 1e-5, 1e-4

SETTINGS = {
    "adamw+groups+cosine": (
        lambda named: torch.optim.AdamW(
            [{"params": [p for n, p in named if not n.endswith(".bias")]},
             {"params": [p for n, p in named if n.endswith(".bias")], "weight_decay": 0.0}],
            lr=1e-4, weight_decay=1.0, eps=1e-3),
        lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=1e-5),
        ["--optimizer", "adamw", "--lr", "1e-4", "--weight-decay", "1.0", "--adam-eps", "1e-3",
         "--no-decay", "*.bias",
         "--lr-schedule", "cosine", "--lr-period", "10", "--lr-min", "1e-5"]),
    "momentum+step": (
        lambda named: torch.optim.SGD([p for _, p in named], lr=0.05, momentum=0.9),
        lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5),
        ["--optimizer", "momentum", "--lr", "0.05", "--lr-schedule", "step",
         "--lr-period", "5", "--lr-gamma", "0.5"]),
}
SETTINGS["sgd+warmup+linear"] = (
    lambda named: torch.optim.SGD([p for _, p in named], lr=0.05),
    lambda opt: torch.optim.lr_scheduler.SequentialLR(
        opt, [torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=4),
              torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.1,
                                                total_iters=10)], milestones=[4]),
    ["--optimizer", "sgd", "--lr", "0.05", "--warmup-steps", "4", "--warmup-start-factor",
     "0.25", "--lr-schedule", "linear", "--lr-start-factor", "1", "--lr-end-factor", "0.1",
     "--lr-period", "10"])
# Momentum SGD whose gradients torch.nn.utils.clip_grad_norm_ clips to a
# global norm of CLIP (per model) before each step (the norm of the step's
# mean gradient, over every parameter); torch_params checks that it clips
# in at least 5 of the 20 steps (it leaves some unclipped too).
CLIP = {"mlp": 2.03, "lenet": 0.3}
SETTINGS["momentum+clip"] = (
    lambda named: torch.optim.SGD([p for _, p in named], lr=0.05, momentum=0.9),
    lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0),
    ["--optimizer", "momentum", "--lr", "0.05", "--clip-grad-norm", "CLIP"])
STRATEGIES = {
    "single": ["--micro-batches", str(MICRO)],
    "dp": ["--strategy", "dp", "--devices", str(MICRO), "--stages", "2"],
    "1f1b": ["--strategy", "1f1b", "--stages", "2", "--micro-batches", str(MICRO)],
    "gpipe": ["--strategy", "gpipe", "--stages", "2", "--micro-batches", str(MICRO)],
    "il-1f1b": ["--strategy", "interleaved-1f1b", "--stages", "4", "--stages-per-device", "2",
                "--micro-batches", str(MICRO)],
    "zb-h1": ["--strategy", "zb-h1", "--stages", "2", "--micro-batches", str(MICRO)],
}


def torch_params(name, path, x, y, setting):
    model = models.build(name)[0]
    models.load_exported(model, path)
    make_opt, make_sched, _ = SETTINGS[setting]
    named = list(model.named_parameters())
    opt = make_opt(named)
    sched = make_sched(opt)
    rows = MICRO * BATCH
    clipped, norms = 0, []
    for t in range(STEPS):
        opt.zero_grad()
        xs, ys = x[t * rows:(t + 1) * rows], y[t * rows:(t + 1) * rows]
        # The mean over the step's micro-batches of each one's mean loss.
        loss = sum(torch.nn.functional.cross_entropy(model(xs[k * BATCH:(k + 1) * BATCH]),
                                                     ys[k * BATCH:(k + 1) * BATCH])
                   for k in range(MICRO)) / MICRO
        loss.backward()
        if setting.endswith("+clip"):
            norms.append(round(float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP[name])), 3))
            clipped += norms[-1] > CLIP[name]
        opt.step()
        sched.step()
    if setting.endswith("+clip"):
        print(f"{name} {setting}: torch clipped {clipped} of {STEPS} steps", norms)
        assert clipped >= 5, "the clip setting would test nothing"
    return {n: p.detach().numpy() for n, p in model.named_parameters()}


def main():
    bin_dir, work, name = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    path = models.export(name, work)
    example = models.build(name)[1]
    torch.manual_seed(3)
    total = STEPS * MICRO * BATCH
    x = torch.randn(total, *example.shape[1:])
    y = torch.randint(0, 10, (total,))
    np.save(os.path.join(work, "x.npy"), x.numpy())
    np.save(os.path.join(work, "y.npy"), y.numpy().astype(np.int64))
    failures = 0
    only = sys.argv[4:]  # optional: SETTING [STRATEGY...] to run just those
    for setting, (_, _, flags) in SETTINGS.items():
        if only and setting != only[0]:
            continue
        want = torch_params(name, path, x, y, setting)
        for strategy, strategy_flags in STRATEGIES.items():
            if len(only) > 1 and strategy not in only[1:]:
                continue
            if setting.endswith("+clip") and strategy == "il-1f1b":
                continue  # refused: two trained stages share a device
            tag = f"{setting}-{strategy}"
            plan = os.path.join(work, tag + ".cdp")
            extra = ["--batch-size", str(BATCH)] if name == "mlp" else []
            model_flags = [str(CLIP[name]) if f == "CLIP" else f for f in flags]
            subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan, *extra,
                            *model_flags, *strategy_flags], check=True)
            params = os.path.join(work, tag + ".params")
            subprocess.run([os.path.join(bin_dir, "cdp-run"), plan,
                            "--feed", "input=" + os.path.join(work, "x.npy"),
                            "--feed", "labels=" + os.path.join(work, "y.npy"),
                            "--steps", str(STEPS), "--dump-params", params],
                           check=True, stdout=subprocess.DEVNULL)
            import json
            index = json.load(open(os.path.join(params, "index.json")))
            worst = 0.0
            ok = True
            for n, expected in want.items():
                got = np.load(os.path.join(params, index[n]))
                worst = max(worst, float(np.max(np.abs(got - expected))))
                ok = ok and np.allclose(got, expected, atol=ATOL, rtol=RTOL)
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name} {setting:22} {strategy:7} "
                  f"max abs error {worst:.2e}")
    print(f"{name}: {'all match' if not failures else str(failures) + ' mismatches'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
