#!/usr/bin/python3
"""Precision under micro-batching: the ResNet with BatchNorm, 4 micro-batches
of 32, 3 SGD steps with momentum, trained by cdp (`single --micro-batches 4`
or `dp` on 4 devices) and by PyTorch in float32 and float64 (gradient
accumulation, the same data). cdp's largest parameter difference from the
float64 run must be within 10 times PyTorch float32's own (floor 1e-6).

Usage: precision_check.py BIN_DIR WORK_DIR STRATEGY...
"""
import copy
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torch_models as models  # noqa: E402

B, M, STEPS, LR = 32, 4, 3, 0.1


def main():
    bin_dir, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    model, _, _ = models.build("resnet")
    path = os.path.join(work, "resnet.onnx")
    model.train()
    torch.onnx.export(model, torch.randn(B, 1, 28, 28), path, input_names=["input"],
                      output_names=["logits"], opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    models.load_exported(model, path)
    initial = copy.deepcopy(model.state_dict())
    torch.manual_seed(3)
    x = torch.randn(M * STEPS * B, 1, 28, 28)
    y = torch.randint(0, 10, (M * STEPS * B,))
    np.save(os.path.join(work, "x.npy"), x.numpy())
    np.save(os.path.join(work, "y.npy"), y.numpy().astype(np.int64))

    def train(dtype):
        m = copy.deepcopy(model)
        m.load_state_dict(initial)
        m.to(dtype)
        opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=0.9)
        for t in range(STEPS):
            opt.zero_grad()
            for k in range(M):
                rows = slice((t * M + k) * B, (t * M + k + 1) * B)
                loss = torch.nn.functional.cross_entropy(m(x[rows].to(dtype)), y[rows]) / M
                loss.backward()
            opt.step()
        return {n: p.detach().double().numpy() for n, p in m.named_parameters()}

    single, double = train(torch.float32), train(torch.float64)
    torch_error = max(np.abs(single[n] - double[n]).max() for n in double)
    failures = 0
    for strategy in sys.argv[3:]:
        flags = (["--micro-batches", str(M)] if strategy == "single"
                 else ["--strategy", strategy, "--devices", str(M)])
        plan = os.path.join(work, strategy + ".cdp")
        out = os.path.join(work, strategy)
        subprocess.run([os.path.join(bin_dir, "cdp-compile"), path, "-o", plan, "--optimizer",
                        "momentum", "--lr", str(LR)] + flags, check=True)
        subprocess.run([os.path.join(bin_dir, "cdp-run"), plan, "--feed",
                        "input=" + os.path.join(work, "x.npy"), "--feed",
                        "labels=" + os.path.join(work, "y.npy"), "--steps", str(STEPS),
                        "--dump-params", out], check=True, stdout=subprocess.DEVNULL)
        index = json.load(open(os.path.join(out, "index.json")))
        error = max(np.abs(np.load(os.path.join(out, index[n])) - double[n]).max() for n in double)
        ok = error <= max(10 * torch_error, 1e-6)
        failures += not ok
        print("%s %s: %.1e from float64, PyTorch float32 %.1e" % ("ok  " if ok else "FAIL", strategy,
                                                                  error, torch_error))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
