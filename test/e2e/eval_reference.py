#!/usr/bin/python3
"""Trains a CNN with BatchNorm and Dropout 3 steps in cdp, writes it with
--save-onnx-eval, and compares cdp's inference on that file with PyTorch's
model.eval() holding the same trained weights and statistics.

Usage: eval_reference.py CDP_BIN_DIR WORK_DIR
Prints the largest difference of the logits (checked to 1e-5) and whether
the training-mode file (--save-onnx) run with --inference differs from
eval(): ONNX's semantics, batch statistics and Dropout on. Exits 1 when
the eval file does not match.
"""

import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
from torch import nn

ATOL = 1e-5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, 1, 1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(self.drop(torch.flatten(x, 1)))


def run(bin_dir, *args):
    subprocess.run([os.path.join(bin_dir, args[0])] + list(args[1:]), check=True,
                   stdout=subprocess.DEVNULL)


def cdp_logits(bin_dir, work, model_path, name):
    plan = os.path.join(work, name + ".cdp")
    out = os.path.join(work, name)
    run(bin_dir, "cdp-compile", model_path, "--inference", "-o", plan)
    run(bin_dir, "cdp-run", plan, "--feed", "input=" + os.path.join(work, "test.npy"),
        "--save-outputs", out)
    return np.load(os.path.join(out, "logits.npy"))


def main():
    bin_dir, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    model = Net()
    path = os.path.join(work, "net.onnx")
    torch.onnx.export(model, torch.randn(8, 1, 8, 8), path, input_names=["input"],
                      output_names=["logits"], opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    rng = np.random.default_rng(0)
    np.save(os.path.join(work, "x.npy"), rng.standard_normal((8, 1, 8, 8)).astype(np.float32))
    np.save(os.path.join(work, "y.npy"), rng.integers(0, 10, 8))
    # Test inputs unlike the training batch (shifted, scaled): batch
    # statistics and running statistics then differ clearly.
    test = (rng.standard_normal((8, 1, 8, 8)) * 3 + 1).astype(np.float32)
    np.save(os.path.join(work, "test.npy"), test)

    train = os.path.join(work, "train.cdp")
    run(bin_dir, "cdp-compile", path, "-o", train, "--lr", "0.1")
    eval_path = os.path.join(work, "eval.onnx")
    trained_path = os.path.join(work, "trained.onnx")
    run(bin_dir, "cdp-run", train, "--feed", "input=" + os.path.join(work, "x.npy"),
        "--feed", "labels=" + os.path.join(work, "y.npy"), "--steps", "3",
        "--save-onnx-eval", eval_path, "--save-onnx", trained_path)

    # PyTorch's eval() with the trained weights and statistics of the file.
    saved = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
             for t in onnx.load(eval_path).graph.initializer}
    state = model.state_dict()
    for name in state:
        if name in saved:
            state[name] = saved[name]
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        reference = model(torch.from_numpy(test)).numpy()

    got = cdp_logits(bin_dir, work, eval_path, "eval")
    diff = float(np.abs(got - reference).max())
    print("eval file: max |cdp - torch eval()| %.2e (tolerance %.0e) %s"
          % (diff, ATOL, "ok" if diff <= ATOL else "MISMATCH"))
    trained = cdp_logits(bin_dir, work, trained_path, "trained")
    print("training-mode file under --inference differs from eval():",
          bool(np.abs(trained - reference).max() > 1e-2))
    kinds = [(n.op_type, len(n.output)) for n in onnx.load(eval_path).graph.node
             if n.op_type in ("BatchNormalization", "Dropout")]
    print("eval file nodes:", kinds)
    sys.exit(0 if diff <= ATOL else 1)


if __name__ == "__main__":
    main()
