#!/usr/bin/python3
"""How long `cdp-compile --report` takes to predict a plan for many devices
(the aim: well under a second).

Usage: bench/report_time.py [--build build]
Exports the transformer block, then times `cdp-compile --strategy cdp
--devices N --stages 4 --report` for N = 4 .. 1024 (best of 3 runs); then a
48-layer transformer with gpipe, 1f1b and 2bw on 64 stages and devices.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
import export_torch_models as models  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--build", default="build")
args = parser.parse_args()
with tempfile.TemporaryDirectory() as work:
    path = models.export("transformer", work)
    print("%8s %10s %14s" % ("devices", "seconds", "report bytes"))
    for n in [4, 64, 256, 1024]:
        best = None
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run([os.path.join(args.build, "bin", "cdp-compile"), path, "--batch-axis",
                            "input=1", "--strategy", "cdp", "--devices", str(n), "--stages", "4",
                            "--report", os.path.join(work, "r.json"), "--steps", "3"], check=True)
            elapsed = time.perf_counter() - start
            best = elapsed if best is None else min(best, elapsed)
        print("%8d %10.3f %14d" % (n, best, os.path.getsize(os.path.join(work, "r.json"))))

# Pipelines: a 48-layer transformer encoder (the block of the test models,
# 48 times) cut into 64 stages on 64 devices, 64 micro-batches per step.
import torch  # noqa: E402


class Deep(torch.nn.Module):
    def __init__(self, layers=48):
        super().__init__()
        block = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0)
        self.layers = torch.nn.TransformerEncoder(block, layers)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.layers(x).mean(dim=0))


with tempfile.TemporaryDirectory() as work:
    torch.manual_seed(0)
    path = os.path.join(work, "deep.onnx")
    model = Deep()
    model.train()
    torch.onnx.export(model, torch.randn(6, 8, 32), path, input_names=["input"],
                      output_names=["logits"], opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    print("\n48-layer transformer, 64 stages on 64 devices, 64 micro-batches per step:")
    print("%8s %10s %14s" % ("strategy", "seconds", "report bytes"))
    for strategy in ["gpipe", "1f1b", "2bw"]:
        best = None
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run([os.path.join(args.build, "bin", "cdp-compile"), path, "--batch-axis",
                            "input=1", "--strategy", strategy, "--stages", "64",
                            "--micro-batches", "64", "--report", os.path.join(work, "r.json"),
                            "--steps", "2"], check=True)
            elapsed = time.perf_counter() - start
            best = elapsed if best is None else min(best, elapsed)
        print("%8s %10.3f %14d" % (strategy, best, os.path.getsize(os.path.join(work, "r.json"))))
